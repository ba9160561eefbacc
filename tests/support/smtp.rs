//! A minimal SMTP server for tests (no STARTTLS, no AUTH) that stores every message it
//! accepts, and a reader for the received messages (headers unfolded, body decoded from
//! quoted-printable or base64). Copied from `tests/notify.rs`, made public for other test
//! binaries.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One message the server accepted.
#[derive(Clone, Debug)]
pub struct Received {
    /// MAIL FROM address.
    pub from: String,
    /// RCPT TO addresses.
    pub to: Vec<String>,
    /// The DATA text, dot-unstuffed, without the final ".".
    pub data: String,
}

/// The server: listens on 127.0.0.1 on a free port, one thread per connection.
pub struct SmtpServer {
    /// Its port.
    pub port: u16,
    connections: Arc<AtomicUsize>,
    messages: Arc<Mutex<Vec<Received>>>,
}

impl SmtpServer {
    /// Starts the server.
    pub fn start() -> SmtpServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let connections = Arc::new(AtomicUsize::new(0));
        let messages = Arc::new(Mutex::new(Vec::new()));
        let (c, m) = (connections.clone(), messages.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                c.fetch_add(1, Ordering::SeqCst);
                let m = m.clone();
                std::thread::spawn(move || {
                    let _ = serve(stream, &m);
                });
            }
        });
        SmtpServer {
            port,
            connections,
            messages,
        }
    }

    /// `smtp://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("smtp://127.0.0.1:{}", self.port)
    }

    /// The messages accepted so far.
    pub fn messages(&self) -> Vec<Received> {
        self.messages.lock().unwrap().clone()
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

fn serve(stream: TcpStream, messages: &Mutex<Vec<Received>>) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut out = stream.try_clone()?;
    let mut input = BufReader::new(stream);
    out.write_all(b"220 test.invalid ESMTP test server\r\n")?;
    let mut from = String::new();
    let mut to = Vec::new();
    loop {
        let mut line = String::new();
        if input.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let verb = line
            .split([' ', '\r', '\n', ':'])
            .next()
            .unwrap_or("")
            .to_ascii_uppercase();
        match verb.as_str() {
            "EHLO" => out.write_all(b"250-test.invalid\r\n250 8BITMIME\r\n")?,
            "HELO" | "NOOP" => out.write_all(b"250 ok\r\n")?,
            "RSET" => {
                from.clear();
                to.clear();
                out.write_all(b"250 ok\r\n")?
            }
            "MAIL" => {
                from = angle(&line);
                to.clear();
                out.write_all(b"250 ok\r\n")?
            }
            "RCPT" => {
                to.push(angle(&line));
                out.write_all(b"250 ok\r\n")?
            }
            "DATA" => {
                out.write_all(b"354 go ahead\r\n")?;
                let mut data = String::new();
                loop {
                    let mut l = String::new();
                    if input.read_line(&mut l)? == 0 {
                        return Ok(());
                    }
                    if l == ".\r\n" {
                        break;
                    }
                    data.push_str(l.strip_prefix('.').unwrap_or(&l));
                }
                messages.lock().unwrap().push(Received {
                    from: from.clone(),
                    to: std::mem::take(&mut to),
                    data,
                });
                out.write_all(b"250 queued\r\n")?
            }
            "QUIT" => {
                out.write_all(b"221 bye\r\n")?;
                return Ok(());
            }
            _ => out.write_all(b"502 not implemented\r\n")?,
        }
    }
}

/// The address between `<` and `>` of a MAIL/RCPT line.
fn angle(line: &str) -> String {
    let start = line.find('<').map(|i| i + 1).unwrap_or(0);
    let end = line[start..]
        .find('>')
        .map(|i| start + i)
        .unwrap_or(line.len());
    line[start..end].to_string()
}

/// A received message: headers (unfolded) and the decoded body (`\n` line ends).
pub struct Mail {
    /// Header name and value, in order.
    pub headers: Vec<(String, String)>,
    /// The decoded body.
    pub body: String,
}

impl Mail {
    /// Parses a message as received (DATA) or as given to sendmail.
    pub fn parse(data: &str) -> Mail {
        let (head, body) = data
            .split_once("\r\n\r\n")
            .or_else(|| data.split_once("\n\n"))
            .expect("no header/body separator");
        let mut headers: Vec<(String, String)> = Vec::new();
        for line in head.lines() {
            if line.starts_with([' ', '\t']) {
                let last = headers.last_mut().expect("continuation first");
                last.1.push_str(line);
            } else {
                let (name, value) = line.split_once(':').expect("header line");
                headers.push((name.to_string(), value.trim_start().to_string()));
            }
        }
        let encoding = headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("Content-Transfer-Encoding"))
            .map(|(_, v)| v.trim().to_ascii_lowercase())
            .unwrap_or_else(|| "7bit".into());
        let bytes = match encoding.as_str() {
            "quoted-printable" => decode_qp(body),
            "base64" => decode_base64(body),
            _ => body.as_bytes().to_vec(),
        };
        let body = String::from_utf8(bytes)
            .expect("body is not UTF-8")
            .replace("\r\n", "\n");
        Mail { headers, body }
    }

    /// The first header of that name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn decode_qp(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'=' {
            if bytes[i + 1..].starts_with(b"\r\n") {
                i += 3;
            } else if bytes[i + 1..].starts_with(b"\n") {
                i += 2;
            } else {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap();
                out.push(u8::from_str_radix(hex, 16).expect("bad QP escape"));
                i += 3;
            }
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}

fn decode_base64(text: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0u32);
    for b in text.bytes() {
        if b == b'=' {
            break;
        }
        let Some(v) = ALPHABET.iter().position(|&a| a == b) else {
            continue;
        };
        acc = (acc << 6) | v as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}
