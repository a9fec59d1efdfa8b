//! Virtual hosts chosen by Host (or by the authority of an absolute-form target).

use crate::util::*;

const CONFIG: &str = r#"
root = "top"

[[host]]
names = ["a.example", "alias.example"]
root = "sites/a"
index = ["home.html"]
dotfiles = true

[[host]]
names = ["*.b.example"]
root = "sites/b"

[[host]]
names = ["fallback.example"]
root = "sites/c"
default = true
"#;

fn site() -> Site {
    let site = Site::new();
    site.write("top/index.html", "top");
    site.write("top/who.txt", "top");
    site.write("sites/a/home.html", "a home");
    site.write("sites/a/index.html", "a index");
    site.write("sites/a/who.txt", "a");
    site.write("sites/a/.env", "a env");
    site.write("sites/b/index.html", "b index");
    site.write("sites/b/who.txt", "b");
    site.write("sites/c/index.html", "c index");
    site.write("sites/c/who.txt", "c");
    site.write("sites/c/.env", "c env");
    site
}

fn who(srv: &Server, host: &str) -> Response {
    srv.get_with("/who.txt", &[("Host", host)])
}

httptest!(exact_names, h2, |model| {
    let site = site();
    let srv = site.serve_config(model, CONFIG);
    who(&srv, "a.example").assert_ok(200, "a");
    who(&srv, "alias.example").assert_ok(200, "a");
    who(&srv, "fallback.example").assert_ok(200, "c");
});

httptest!(names_are_case_insensitive_and_ignore_port, h2, |model| {
    let site = site();
    let srv = site.serve_config(model, CONFIG);
    who(&srv, "A.Example").assert_ok(200, "a");
    who(&srv, "a.example:8080").assert_ok(200, "a");
    who(&srv, "A.EXAMPLE:80").assert_ok(200, "a");
    who(&srv, "www.B.example:443").assert_ok(200, "b");
});

httptest!(wildcard_names, h2, |model| {
    let site = site();
    let srv = site.serve_config(model, CONFIG);
    who(&srv, "www.b.example").assert_ok(200, "b");
    who(&srv, "x.b.example").assert_ok(200, "b");
    // The wildcard needs a label in its place.
    who(&srv, "b.example").assert_ok(200, "c");
    who(&srv, "xb.example").assert_ok(200, "c");
});

httptest!(unknown_host_gets_default, h2, |model| {
    let site = site();
    let srv = site.serve_config(model, CONFIG);
    who(&srv, "unknown.example").assert_ok(200, "c");
    who(&srv, "127.0.0.1").assert_ok(200, "c");
    who(&srv, &srv.addr().to_string()).assert_ok(200, "c");
    // HTTP/1.0 without Host.
    srv.request("GET /who.txt HTTP/1.0\r\n\r\n")
        .assert_ok(200, "c");
});

httptest!(absolute_form_picks_host, h2, |model| {
    let site = site();
    let srv = site.serve_config(model, CONFIG);
    srv.request("GET http://a.example/who.txt HTTP/1.1\r\nHost: a.example\r\n\r\n")
        .assert_ok(200, "a");
    // The authority in the target wins over the Host field (RFC 9112 section 3.2.2).
    srv.request("GET http://www.b.example/who.txt HTTP/1.1\r\nHost: a.example\r\n\r\n")
        .assert_ok(200, "b");
    srv.request("GET http://A.EXAMPLE:8080/who.txt HTTP/1.1\r\nHost: other\r\n\r\n")
        .assert_ok(200, "a");
});

httptest!(per_host_settings, h2, |model| {
    let site = site();
    let srv = site.serve_config(model, CONFIG);
    // Host a: its own index list and dotfiles on.
    srv.get_with("/", &[("Host", "a.example")])
        .assert_ok(200, "a home");
    srv.get_with("/.env", &[("Host", "a.example")])
        .assert_ok(200, "a env");
    // Host c: the defaults.
    srv.get_with("/", &[("Host", "fallback.example")])
        .assert_ok(200, "c index");
    srv.get_with("/.env", &[("Host", "fallback.example")])
        .assert_status(404);
    srv.get_with("/", &[("Host", "www.b.example")])
        .assert_ok(200, "b index");
});

httptest!(hosts_on_one_connection, |model| {
    let site = site();
    let srv = site.serve_config(model, CONFIG);
    let mut c = srv.connect();
    let mut all = String::new();
    for host in ["a.example", "x.b.example", "nobody.example", "a.example"] {
        all.push_str(&req("GET", "/who.txt", &[("Host", host)]));
    }
    c.send(all);
    let rs = c.read_responses(&["GET"; 4]);
    for (r, want) in rs.iter().zip(["a", "b", "c", "a"]) {
        r.assert_ok(200, want);
    }
});
