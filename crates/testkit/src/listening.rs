//! A server the test started as a child process: its standard error kept as it comes, its
//! address taken from its "listening on ADDR" line, and SIGTERM (then SIGKILL) on drop.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpStream};
use std::process::Child;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// A started server; see the module.
pub struct Listening {
    child: Child,
    /// Where it listens, from its log.
    pub addr: SocketAddr,
    log: Arc<Mutex<String>>,
}

impl Listening {
    /// Takes `child`, started with its standard error piped, and waits up to `start` for
    /// the line that says where it listens; the test fails with the log if none comes.
    pub fn adopt(mut child: Child, start: Duration) -> Listening {
        let stderr = child.stderr.take().expect("standard error piped");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        let kept = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                {
                    let mut log = kept.lock().unwrap();
                    log.push_str(&line);
                    log.push('\n');
                }
                if let Some(at) = line.find("listening on ") {
                    let rest = &line[at + "listening on ".len()..];
                    let _ = tx.send(rest.split([' ', ',']).next().unwrap().to_string());
                }
            }
        });
        let addr = match rx.recv_timeout(start) {
            Ok(a) => a.parse().unwrap(),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the server did not start: {}", log.lock().unwrap());
            }
        };
        Listening { child, addr, log }
    }

    /// A connection to it, reads timing out after 10 s.
    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }

    /// What it has written to standard error so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// The log once it holds `text` (a line written as a connection closes may come a
    /// moment after the client saw the close), or as it is after `within`.
    pub fn wait_log(&self, text: &str, within: Duration) -> String {
        let until = Instant::now() + within;
        loop {
            let log = self.log();
            if log.contains(text) || Instant::now() > until {
                return log;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        // SAFETY: signals our own child by its pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("server log:\n{}", self.log());
        }
    }
}
