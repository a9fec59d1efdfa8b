/// Defines an HTTP test once and instantiates it for every concurrency model.
///
/// ```ignore
/// httptest!(range_single, |model| {
///     let site = Site::new();
///     site.file("digits.txt", "0123456789");
///     let srv = site.serve(model);
///     // ...
/// });
/// ```
///
/// expands to a module `range_single` with one `#[test]` per model, so the
/// test names read `ranges::range_single::epoll`, `ranges::range_single::uring`,
/// ... and `cargo test epoll` runs every test against one model.
///
/// `httptest!(name, h2, |model| ...)` runs it once more on every model with each
/// request sent over HTTP/2 (`name::h2::epoll`, ...).
///
/// The list of models lives here and nowhere else (`@models`): when a driver
/// lands, add one test for it there and every HTTP test runs against it.
macro_rules! httptest {
    // As below, and once more on every model with each request sent over HTTP/2 (the
    // tests of what a request gets, which must not depend on the protocol): the second set
    // is named `NAME::h2::MODEL`.
    ($name:ident, h2, $fun:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            fn run_with_model(model: &'static str) {
                let f: fn(&'static str) = $fun;
                f(model)
            }

            httptest!(@models);

            mod h2 {
                #[allow(unused_imports)]
                use super::*;

                fn run_with_model(model: &'static str) {
                    crate::util::over_h2(|| super::run_with_model(model))
                }

                httptest!(@models);
            }
        }
    };
    ($name:ident, $fun:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[allow(dead_code)]
            fn run_with_model(model: &'static str) {
                let f: fn(&'static str) = $fun;
                f(model)
            }

            httptest!(@models);
        }
    };
    (@models) => {
        #[test]
        fn epoll() {
            run_with_model("epoll")
        }

        #[test]
        fn uring() {
            run_with_model("uring")
        }

        #[test]
        fn percore() {
            run_with_model("percore")
        }

        #[test]
        fn threads() {
            run_with_model("threads")
        }

        #[test]
        fn prefork() {
            run_with_model("prefork")
        }
    };
}
