//! A loopback llama.cpp-shaped server for measuring the client itself (`ctxbench overhead`,
//! the replay scheduler's lateness example): it answers every request with the same stream
//! events, one write each, as fast as the socket takes them; connections are served
//! concurrently on a thread of its own, so the client's thread does none of its work.

use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A running loopback server.
pub struct Loopback {
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Its thread (it serves until the process ends).
    pub thread: JoinHandle<()>,
}

/// llama.cpp `/completion` stream events: `tokens` token events, then the final event with
/// its `timings`, each counting `prompt_tokens` prompt tokens.
pub fn llamacpp_events(tokens: u32, prompt_tokens: u64) -> Vec<Vec<u8>> {
    let mut events: Vec<Vec<u8>> = (1..=tokens)
        .map(|i| {
            format!(
                "data: {{\"content\":\"x\",\"tokens\":[42],\"stop\":false,\"tokens_predicted\":{i},\"tokens_evaluated\":{prompt_tokens}}}\n\n"
            )
            .into_bytes()
        })
        .collect();
    events.push(format!(
        "data: {{\"content\":\"\",\"tokens\":[],\"stop\":true,\"tokens_predicted\":{tokens},\"tokens_evaluated\":{prompt_tokens},\"stop_type\":\"limit\",\"timings\":{{\"cache_n\":0,\"prompt_n\":{prompt_tokens},\"prompt_ms\":0.1,\"predicted_n\":{tokens},\"predicted_ms\":1.0}}}}\n\n"
    ).into_bytes());
    events
}

/// Starts a server on 127.0.0.1 (a free port) that reads each request whole (head and
/// `Content-Length` body), answers with `events` and closes; `after_answer` runs on the
/// server's thread after each answer (e.g. to publish that thread's CPU time).
pub fn serve(
    events: Vec<Vec<u8>>,
    after_answer: impl Fn() + Send + Sync + 'static,
) -> std::io::Result<Loopback> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    listener.set_nonblocking(true)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (events, after) = (Arc::new(events), Arc::new(after_answer));
    let thread = std::thread::spawn(move || {
        rt.block_on(async move {
            let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                return;
            };
            while let Ok((mut sock, _)) = listener.accept().await {
                let (events, after) = (events.clone(), after.clone());
                tokio::spawn(async move {
                    let _ = sock.set_nodelay(true);
                    read_request(&mut sock).await;
                    let head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";
                    if sock.write_all(head).await.is_ok() {
                        for e in events.iter() {
                            if sock.write_all(e).await.is_err() {
                                break;
                            }
                        }
                        let _ = sock.shutdown().await;
                    }
                    after();
                });
            }
        });
    });
    Ok(Loopback { port, thread })
}

/// Reads one request's head and its `Content-Length` body (or until the peer closes).
async fn read_request(sock: &mut tokio::net::TcpStream) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    while let Ok(n) = sock.read(&mut chunk).await {
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_events_end_with_timings_counting_the_prompt() {
        let e = llamacpp_events(2, 64);
        assert_eq!(e.len(), 3);
        let last = String::from_utf8(e[2].clone()).unwrap();
        assert!(last.contains("\"stop\":true") && last.contains("\"prompt_n\":64"));
    }
}
