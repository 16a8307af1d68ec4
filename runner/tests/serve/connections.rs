//! Connections that hold the service without sending (issue 39 item 3): a silent one, one with
//! partial headers and an idle keep-alive one are closed at `--header-timeout`; a partial body
//! is answered 408 at `--body-timeout`; past `--max-connections` a new connection is answered
//! 503 and closed, and the service answers again once one closes.

use crate::support::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn connect(s: &Server) -> TcpStream {
    let tcp = TcpStream::connect(s.base.strip_prefix("http://").unwrap()).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    tcp
}

/// Reads until the service closes the connection: what it sent, and how long that took.
fn read_to_close(tcp: &mut TcpStream) -> (String, Duration) {
    let start = Instant::now();
    let mut out = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match tcp.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("still open after {:?}: {e}", start.elapsed()),
        }
    }
    (String::from_utf8_lossy(&out).into_owned(), start.elapsed())
}

#[tokio::test]
async fn connections_that_do_not_send_are_closed_at_the_read_timeouts() {
    let dir = temp_dir("read-timeouts");
    let s = Server::start(
        &dir,
        &[
            "--fake-worker",
            "--header-timeout",
            "0.5",
            "--body-timeout",
            "0.5",
        ],
    );
    let within = Duration::from_secs(4);

    let mut silent = connect(&s);
    let (_, took) = read_to_close(&mut silent);
    assert!(took < within, "silent: {took:?}");

    let mut partial = connect(&s);
    partial
        .write_all(b"GET /api/health HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let (_, took) = read_to_close(&mut partial);
    assert!(took < within, "partial headers: {took:?}");

    let mut body = connect(&s);
    body.write_all(b"POST /api/compile HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"progr")
        .unwrap();
    let (answer, took) = read_to_close(&mut body);
    assert!(took < within, "partial body: {took:?}");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("body_timeout_s"), "{answer}");

    // A keep-alive connection: answered, then closed once idle for the header timeout.
    let mut idle = connect(&s);
    idle.write_all(b"GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let (answer, took) = read_to_close(&mut idle);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(took < within, "idle keep-alive: {took:?}");

    let (status, _) = get(&client(), s.url("/api/health")).await;
    assert_eq!(status, 200);
    s.stop();
}

#[tokio::test]
async fn past_the_connection_cap_a_connection_is_answered_503_and_closed() {
    let dir = temp_dir("connection-cap");
    let s = Server::start(
        &dir,
        &[
            "--fake-worker",
            "--max-connections",
            "2",
            "--header-timeout",
            "60",
        ],
    );
    let held = [connect(&s), connect(&s)];
    let mut third = connect(&s);
    third
        .write_all(b"GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let (answer, _) = read_to_close(&mut third);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("retry-after: 1"), "{answer}");
    assert!(answer.contains("\"limit\":\"max_connections\""), "{answer}");
    drop(held);
    let c = client();
    let start = Instant::now();
    loop {
        let (status, _) = get(&c, s.url("/api/health")).await;
        if status == 200 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "{status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    s.stop();
}
