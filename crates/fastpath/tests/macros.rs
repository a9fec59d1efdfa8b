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
/// The list of models lives here and nowhere else: when a driver lands, add
/// one line for it below and every HTTP test runs against it.
macro_rules! httptest {
    ($name:ident, $fun:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[allow(dead_code)]
            fn run_with_model(model: &'static str) {
                let f: fn(&'static str) = $fun;
                f(model)
            }

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
        }
    };
}
