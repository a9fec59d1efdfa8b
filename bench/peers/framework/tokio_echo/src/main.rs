//! Echo server on tokio, as a Rust programmer would write it: the multi-thread runtime (one
//! worker per core), one task per connection, a read buffer reused for the connection's life.
//!
//! Protocol (Slick's echo benchmark): the client sends its buffer size as a 4-byte big-endian
//! integer, then messages; every byte after the header is sent back as it arrives. With
//! `--plain` there is no header.
//!
//! Usage: tokio_echo [--plain] PORT   (listens on 127.0.0.1)

use std::process::ExitCode;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The read buffer: the size the client announced, at least 4 KiB, at most 64 KiB.
const MIN_BUF: usize = 4096;
const MAX_BUF: usize = 64 * 1024;

async fn serve(mut stream: TcpStream, plain: bool) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut size = MAX_BUF;
    if !plain {
        let mut header = [0u8; 4];
        stream.read_exact(&mut header).await?;
        size = u32::from_be_bytes(header) as usize;
    }
    let mut buf = vec![0u8; size.clamp(MIN_BUF, MAX_BUF)];
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        stream.write_all(&buf[..n]).await?;
    }
}

fn main() -> ExitCode {
    let mut plain = false;
    let mut port = None;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--plain" => plain = true,
            a if port.is_none() && !a.starts_with('-') => port = Some(a.to_owned()),
            _ => {
                eprintln!("usage: tokio_echo [--plain] PORT");
                return ExitCode::from(2);
            }
        }
    }
    let Some(port) = port else {
        eprintln!("usage: tokio_echo [--plain] PORT");
        return ExitCode::from(2);
    };
    let Ok(port) = port.parse::<u16>() else {
        eprintln!("tokio_echo: bad port {port}");
        return ExitCode::from(2);
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async move {
        let listener = match TcpListener::bind(("127.0.0.1", port)).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("tokio_echo: cannot listen on 127.0.0.1:{port}: {e}");
                return ExitCode::FAILURE;
            }
        };
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        tokio::spawn(async move {
                            let _ = serve(stream, plain).await;
                        });
                    }
                    // EMFILE and the like: report, and give connections time to close
                    // instead of spinning on the error.
                    Err(e) => {
                        eprintln!("tokio_echo: accept: {e}");
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    }
                },
                _ = tokio::signal::ctrl_c() => return ExitCode::SUCCESS,
            }
        }
    })
}
