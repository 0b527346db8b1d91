//! HTTPS with rustls: a local TLS proxy with a self-signed certificate in front of the real
//! reference llama-server. Trusted with --ca-cert, refused (with a clear message) without.

use crate::common;

use std::sync::Arc;

use common::{serial, sweep, RefServer};
use ctxbench_schema::record::Status;
use tokio_rustls::rustls;

/// Starts a TLS-terminating proxy to `backend_port`; returns (port, CA certificate PEM).
fn tls_proxy(backend_port: u16) -> (u16, String) {
    let cert =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .unwrap();
    let pem = cert.cert.pem();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.signing_key.serialize_der().into());
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![cert.cert.der().clone()], key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let Ok((sock, _)) = listener.accept().await else {
                    continue;
                };
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(sock).await else {
                        return;
                    };
                    let Ok(mut up) =
                        tokio::net::TcpStream::connect(("127.0.0.1", backend_port)).await
                    else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut up).await;
                });
            }
        });
    });
    (port, pem)
}

#[test]
fn https_with_a_private_ca_works_and_without_it_is_refused_clearly() {
    let _g = serial();
    let srv = RefServer::start(8192, &[]);
    let (port, pem) = tls_proxy(srv.port);
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, pem).unwrap();
    // The proxy listens on 127.0.0.1 only; `localhost` may resolve to ::1 first.
    let url = format!("https://127.0.0.1:{port}");

    let s = sweep(
        &url,
        &[
            "--contexts",
            "1k",
            "--reps",
            "2",
            // A decode long enough that the proxy (a thread of this test process) cannot
            // swallow it in one read when the host deschedules it: with 32 tokens (about 30
            // ms here) both samples arrived in one burst under two busy loops, correctly
            // flagged held_back_stream, and the sweep had nothing usable.
            "--output-tokens",
            "256",
            "--ca-cert",
            ca.to_str().unwrap(),
        ],
    )
    .ok()
    .results()
    .samples;
    assert_eq!(s.len(), 2);
    assert!(s
        .iter()
        .all(|x| x.status == Status::Ok && x.prompt_tokens == Some(1024)));

    let refused = sweep(&url, &["--contexts", "1k"]);
    let stderr = &refused.stderr;
    assert_eq!(refused.code, 1, "{stderr}");
    let err = stderr
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_default();
    assert!(
        err.to_lowercase().contains("certificate") && err.contains("--ca-cert"),
        "unclear TLS error: {stderr}"
    );
    eprintln!("without --ca-cert: {err}");
}
