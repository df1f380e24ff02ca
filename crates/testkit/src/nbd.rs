//! NBD servers for tests: Debian's `nbdkit` or `qemu-nbd` on a Unix socket in a short
//! temporary directory (a socket's path must fit in 108 bytes), killed
//! when dropped. A test gets the server's URI, its
//! process id (to stop, continue or kill it mid-run), and its log.

use std::path::{Path, PathBuf};

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `nbdkit`, killed and reaped on drop.
pub struct NbdServer {
    child: Option<Child>,
    socket: PathBuf,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl NbdServer {
    /// `nbdkit` serving `args` (options such as `-r` or `--filter=NAME`,
    /// then a plugin and its parameters).
    pub fn nbdkit(name: &str, args: &[&str]) -> NbdServer {
        let mut all = vec!["--foreground", "--exit-with-parent", "--unix", "{socket}"];
        all.extend_from_slice(args);
        NbdServer::start("nbdkit", name, &all)
    }

    /// `nbdkit` serving `args` on TCP `port` of 127.0.0.1 (ready once the
    /// port answers).
    pub fn nbdkit_tcp(name: &str, port: &str, args: &[&str]) -> NbdServer {
        let mut all = vec![
            "--foreground",
            "--exit-with-parent",
            "--ipaddr",
            "127.0.0.1",
            "--port",
            port,
        ];
        all.extend_from_slice(args);
        let server = NbdServer::spawn("nbdkit", name, &all);
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port.parse::<u16>().unwrap())).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "nbdkit did not listen on port {port}: {}",
                server.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    /// `qemu-nbd` serving the raw file `image`, for one client at a time
    /// (its default) but staying up between clients.
    pub fn qemu_nbd(name: &str, image: &Path) -> NbdServer {
        let image = image.to_str().unwrap();
        NbdServer::start(
            "qemu-nbd",
            name,
            &[
                "--socket",
                "{socket}",
                "--format",
                "raw",
                "--persistent",
                image,
            ],
        )
    }

    /// Runs `program` with `args`, `{socket}` replaced by the socket path,
    /// and waits for the socket.
    fn start(program: &str, name: &str, args: &[&str]) -> NbdServer {
        let server = NbdServer::spawn(program, name, args);
        server.wait_for_socket();
        server
    }

    fn spawn(program: &str, name: &str, args: &[&str]) -> NbdServer {
        let dir = tempfile::Builder::new()
            .prefix("stitch-nbd")
            .tempdir_in("/tmp")
            .unwrap();
        let socket = dir.path().join(format!("{name}.sock"));
        let log = dir.path().join(format!("{name}.log"));
        let _ = std::fs::remove_file(&socket);
        let err = std::fs::File::create(&log).unwrap();
        let sock = socket.to_str().unwrap();
        let child = Command::new(program)
            .args(args.iter().map(|a| a.replace("{socket}", sock)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {program} (scripts/setup.sh installs it): {e}"));
        NbdServer {
            child: Some(child),
            socket,
            log,
            _dir: dir,
        }
    }

    /// An empty export of `size` (e.g. "256M") in the server's memory.
    pub fn memory(name: &str, size: &str) -> NbdServer {
        NbdServer::nbdkit(name, &["memory", size])
    }

    /// The file `image` exported as it is.
    pub fn file(name: &str, image: &Path) -> NbdServer {
        let file = format!("file={}", image.display());
        NbdServer::nbdkit(name, &["file", &file])
    }

    fn wait_for_socket(&self) {
        let start = Instant::now();
        while !self.socket.exists() {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "the server did not open {} within 20 s: {}",
                self.socket.display(),
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The URI that reaches the default export on the Unix socket (a
    /// server on TCP is reached as `nbd://127.0.0.1:PORT/`).
    pub fn uri(&self) -> String {
        format!("nbd+unix:///?socket={}", self.socket.display())
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().map_or(0, |c| c.id() as i32)
    }

    /// Sends `sig` to the server (SIGSTOP stalls it, SIGCONT resumes it).
    pub fn signal(&self, sig: i32) {
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(self.pid(), sig) };
    }

    /// Stops the server (SIGSTOP) and returns once every thread of it is
    /// stopped: a signal is delivered asynchronously, and a server still
    /// answering for a moment would let a test's next call through.
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
        let tasks = format!("/proc/{}/task", self.pid());
        let start = Instant::now();
        let stopped = || {
            std::fs::read_dir(&tasks).is_ok_and(|d| {
                d.flatten().all(|t| {
                    std::fs::read_to_string(t.path().join("stat")).is_ok_and(|st| {
                        st.rsplit_once(')')
                            .and_then(|(_, rest)| rest.split_whitespace().next())
                            == Some("T")
                    })
                })
            })
        };
        while !stopped() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the server did not stop"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Kills the server now (SIGKILL), as a crash of its machine would.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for NbdServer {
    fn drop(&mut self) {
        self.signal(libc::SIGCONT);
        self.kill();
    }
}
