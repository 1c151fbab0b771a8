//! The patched tiny_http through its own API, for the patches that trigd's
//! configuration cannot reach: a connection thread that cannot be created,
//! and the defaults for a server that passes no answers of its own.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use crate::util::*;

/// A server on a free loopback port with `limits`, answering 200 to all.
fn server(limits: tiny_http::ServerLimits) -> (tiny_http::Server, String) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let handler: tiny_http::Handler = Arc::new(|rq: tiny_http::Request| {
        let _ = rq.respond(tiny_http::Response::from_string("ok"));
    });
    let server = tiny_http::Server::from_listener_with_handler(listener, limits, handler).unwrap();
    (server, addr)
}

#[test]
fn a_connection_thread_that_cannot_start_closes_its_connection_and_accepting_goes_on() {
    // No thread can have a stack larger than the address space.
    let limits = tiny_http::ServerLimits {
        min_threads: 0,
        thread_stack: 1 << 47,
        ..Default::default()
    };
    let (server, addr) = server(limits);
    for i in 0..3 {
        let mut s = connect(&addr);
        let _ = s.write_all(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n");
        let mut got = Vec::new();
        // Closed without an answer (EOF or reset), not left hanging: the
        // accept loop is still there to close the next one too.
        match s.read_to_end(&mut got) {
            Ok(_) => assert!(got.is_empty(), "connection {i} got {got:?}"),
            Err(e) => assert!(
                !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ),
                "connection {i} hangs: {e}"
            ),
        }
    }
    assert!(
        wait_until(WAIT, || server.open_connections() == 0),
        "connections are still counted open"
    );
}

/// Limits that refuse a request line past 64 bytes (414).
fn short_request_lines() -> tiny_http::ServerLimits {
    tiny_http::ServerLimits {
        head: tiny_http::HeadLimits {
            max_request_line: 64,
            ..Default::default()
        },
        socket_timeout: Duration::from_secs(10),
        ..Default::default()
    }
}

#[test]
fn without_answers_of_its_own_a_refused_request_gets_an_empty_body() {
    let (_server, addr) = server(short_request_lines());
    let long = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(100));
    let r = send_raw(&addr, long.as_bytes());
    r.status_is(414);
    r.check_eq(r.body.as_slice(), b"".as_slice(), "body");
    r.check_eq(r.header("Content-Type"), None, "Content-Type");
    // Within the limits, the handler answers on the connection's thread.
    send_raw(&addr, b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n").status_is(200);
}

#[test]
fn every_answer_names_trigd_as_its_server_and_nothing_more() {
    let (_server, addr) = server(short_request_lines());
    // The handler's answer (written by `compose_in_memory`) and the
    // server's own refusal (`Response::raw_print`) alike.
    let ok = send_raw(&addr, b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n");
    ok.status_is(200);
    ok.check_eq(ok.header("Server"), Some("trigd"), "Server of a 200");
    let long = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(100));
    let refused = send_raw(&addr, long.as_bytes());
    refused.status_is(414);
    refused.check_eq(refused.header("Server"), Some("trigd"), "Server of a 414");
    let servers = refused
        .headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("Server"));
    refused.check_eq(servers.count(), 1, "Server headers");
}

/// A server on a free loopback port whose answer is what it read of each
/// request: the URL, then each header as `name=value`, separated by `|`.
fn echo_server() -> (tiny_http::Server, String) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let handler: tiny_http::Handler = Arc::new(|rq: tiny_http::Request| {
        let mut seen = vec![rq.url().to_string()];
        seen.extend(
            rq.headers()
                .iter()
                .map(|h| format!("{}={}", h.field, h.value)),
        );
        let _ = rq.respond(tiny_http::Response::from_string(seen.join("|")));
    });
    let limits = tiny_http::ServerLimits {
        socket_timeout: Duration::from_secs(10),
        ..Default::default()
    };
    let server = tiny_http::Server::from_listener_with_handler(listener, limits, handler).unwrap();
    (server, addr)
}

#[test]
fn request_heads_are_read_alike_in_one_piece_and_a_byte_at_a_time() {
    let (_server, addr) = echo_server();
    let heads = [
        "GET /a?x=1 HTTP/1.1\r\nHost: h\r\nX-Empty:\r\n\r\n",
        // Only CR LF ends a line (a CR alone in a value is refused:
        // `limits::header_lines_a_proxy_may_read_otherwise_are_400`).
        "GET /b HTTP/1.1\r\nX-Two: 1 2\r\nX-Last: z\r\n\r\n",
        "GET /c HTTP/1.1\r\nConnection: close\r\n\r\n",
    ];
    let want = [
        "/a?x=1|Host=h|X-Empty=",
        "/b|X-Two=1 2|X-Last=z",
        "/c|Connection=close",
    ];
    // All three requests in one write (read out of one buffer), then the
    // same bytes one write each (every line cut at every byte, CR LF too).
    let all: Vec<u8> = heads.concat().into_bytes();
    for pieces in [vec![all.clone()], all.iter().map(|b| vec![*b]).collect()] {
        let mut s = connect(&addr);
        s.set_nodelay(true).unwrap();
        for piece in &pieces {
            s.write_all(piece).unwrap();
        }
        let mut r = std::io::BufReader::new(s);
        for w in want {
            let reply = read_reply(&mut r).unwrap();
            reply.status_is(200);
            reply.check_eq(reply.text().as_str(), w, "what the server read");
        }
    }
}

/// A request that ends its connection (`Connection: close`, or HTTP/1.0
/// without `keep-alive`) gets `Connection: close` in its answer, from
/// either way of answering (`respond` and `respond_bytes`), and one that
/// keeps it open gets none (RFC 9112 §9.6).
#[test]
fn the_answer_to_a_last_request_says_connection_close() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let handler: tiny_http::Handler = Arc::new(|mut rq: tiny_http::Request| {
        let _ = match rq.url() {
            "/bytes" => rq.respond_bytes(200, &[("Content-Type", "text/plain")], b"ok".to_vec()),
            // As trigd's server answers: the headers moved out first.
            "/taken" => {
                let _ = rq.take_headers();
                rq.respond_bytes(200, &[("Content-Type", "text/plain")], b"ok".to_vec())
            }
            _ => rq.respond(tiny_http::Response::from_string("ok")),
        };
    });
    let limits = tiny_http::ServerLimits {
        socket_timeout: Duration::from_secs(10),
        ..Default::default()
    };
    let _server = tiny_http::Server::from_listener_with_handler(listener, limits, handler).unwrap();
    for path in ["/bytes", "/taken", "/response"] {
        for (version, connection, closes) in [
            ("1.1", "Connection: close\r\n", true),
            ("1.1", "Connection: Keep-Alive, Close\r\n", true),
            ("1.0", "", true),
            ("1.0", "Connection: keep-alive\r\n", false),
            ("1.1", "", false),
        ] {
            let mut s = connect(&addr);
            let head = format!("GET {path} HTTP/{version}\r\nHost: h\r\n{connection}\r\n");
            s.write_all(head.as_bytes()).unwrap();
            let reply = read_reply(&mut std::io::BufReader::new(s)).unwrap();
            reply.status_is(200);
            let want = closes.then_some("close");
            reply.check_eq(reply.header("Connection"), want, &format!("{head:?}"));
        }
    }
}

/// The server's own answers say `Connection: close` to a request that
/// ends its connection: its handler moves the request's headers out
/// before answering (`Request::take_headers`), which once took the
/// `Connection` header the answer is composed from (the connection was
/// closed without a word: wrk counted a read error per request).
#[test]
fn trigd_says_connection_close_to_a_request_that_ends_its_connection() {
    let (_dir, t) = serve("vendor_close", "", &[]);
    for (head, want) in [
        ("GET /healthz HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", Some("close")),
        ("POST /api?api_key=wrong HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", Some("close")),
        ("GET /healthz HTTP/1.1\r\nHost: h\r\n\r\n", None),
    ] {
        let mut s = connect(&t.addr);
        s.write_all(head.as_bytes()).unwrap();
        let reply = read_reply(&mut std::io::BufReader::new(s)).unwrap();
        reply.check_eq(reply.header("Connection"), want, &format!("{head:?}"));
    }
}
