//! A local SMTP sink for e-mail alarms: speaks enough SMTP (RFC 5321, no TLS, no auth) for a
//! client to deliver, and keeps every message it accepts.

use std::sync::{Arc, Mutex};

use anyhow::Result;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// One message the sink accepted.
#[derive(Debug, Clone, Default)]
pub struct Mail {
    pub from: String,
    pub to: Vec<String>,
    /// Headers and body as sent (dot-stuffing undone).
    pub data: String,
}

/// Stops listening when dropped.
pub struct SmtpSink {
    port: u16,
    got: Arc<Mutex<Vec<Mail>>>,
    stop: CancellationToken,
}

impl SmtpSink {
    pub async fn start() -> Result<SmtpSink> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let got = Arc::new(Mutex::new(Vec::new()));
        let stop = CancellationToken::new();
        let (store, until) = (got.clone(), stop.clone());
        tokio::spawn(async move {
            loop {
                let conn = tokio::select! {
                    _ = until.cancelled() => return,
                    c = listener.accept() => c,
                };
                if let Ok((stream, _)) = conn {
                    tokio::spawn(session(stream, store.clone()));
                }
            }
        });
        Ok(SmtpSink { port, got, stop })
    }

    /// `smtp://127.0.0.1:<port>` (plain SMTP).
    pub fn url(&self) -> String {
        format!("smtp://127.0.0.1:{}", self.port)
    }

    pub fn received(&self) -> Vec<Mail> {
        self.got.lock().map(|g| g.clone()).unwrap_or_default()
    }
}

impl Drop for SmtpSink {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn address(arg: &str) -> String {
    let a = arg.split_once(':').map_or(arg, |(_, a)| a).trim();
    a.trim_start_matches('<')
        .split('>')
        .next()
        .unwrap_or_default()
        .to_owned()
}

async fn session(stream: TcpStream, store: Arc<Mutex<Vec<Mail>>>) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    write.write_all(b"220 cadenza-test-sink ESMTP\r\n").await?;
    let mut mail = Mail::default();
    while let Some(line) = lines.next_line().await? {
        let upper = line.to_ascii_uppercase();
        let reply: &[u8] = if upper.starts_with("EHLO") || upper.starts_with("HELO") {
            b"250 cadenza-test-sink\r\n"
        } else if upper.starts_with("MAIL FROM") {
            mail = Mail {
                from: address(&line),
                ..Mail::default()
            };
            b"250 OK\r\n"
        } else if upper.starts_with("RCPT TO") {
            mail.to.push(address(&line));
            b"250 OK\r\n"
        } else if upper == "DATA" {
            write
                .write_all(b"354 end data with <CR><LF>.<CR><LF>\r\n")
                .await?;
            let mut data = String::new();
            while let Some(l) = lines.next_line().await? {
                if l == "." {
                    break;
                }
                data.push_str(l.strip_prefix('.').unwrap_or(&l));
                data.push('\n');
            }
            mail.data = data;
            if let Ok(mut g) = store.lock() {
                g.push(std::mem::take(&mut mail));
            }
            b"250 OK queued\r\n"
        } else if upper == "QUIT" {
            write.write_all(b"221 bye\r\n").await?;
            return Ok(());
        } else if upper == "RSET" || upper == "NOOP" {
            b"250 OK\r\n"
        } else {
            b"502 command not implemented\r\n"
        };
        write.write_all(reply).await?;
    }
    Ok(())
}
