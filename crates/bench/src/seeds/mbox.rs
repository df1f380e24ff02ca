//! Featherstitch's IMAP test as its authors ran it ("Generalized File
//! System Dependencies", §8.5): 1,000 messages of 2 KB moved from one mbox
//! mailbox to another by a server that either fsyncs at every operation the
//! protocol needs durable (**imap-mbox**) or orders its commands with
//! patchgroups and syncs only at CHECK and EXPUNGE (**imap-pg**, stitchfs
//! alone). Dovecot (the `imap` workload) keeps Maildir and knows no
//! patchgroups, so the server is ours: `mboxd.py`, a small IMAP4rev1
//! server over mbox files in UW IMAP's format (its docstring says what it
//! stores and where each regime syncs; `test_mboxd.py` tests it, the
//! patchgroup calls against a stand-in). The client is Python's imaplib
//! (`mbox_client.py`).
//!
//! The source mailbox is filled untimed by a server that neither syncs nor
//! orders, made durable by the setup's syncfs, so both regimes start from
//! the same disk; the server of the regime is started before the phase.
//! The phase is the client's session, select to logout (its STATUS checks
//! included), then the syncfs every phase ends with.

use super::{log_tail, run_tool, Prepared, Scale};
use crate::workload::{syncfs, Run};
use anyhow::{bail, Context};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The server, written to the run's inputs directory.
const SERVER: &str = include_str!("mboxd.py");
/// The client.
const CLIENT: &str = include_str!("mbox_client.py");

/// How the server makes its changes durable (its `--durability`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Durability {
    /// fsync wherever the protocol says a change is stored: the unmodified
    /// server.
    Fsync,
    /// Each command's changes in a patchgroup depending on the previous
    /// command's; pg_sync at CHECK and EXPUNGE; no fsync.
    Patchgroups,
    /// Neither: the untimed fill.
    Nothing,
}

impl Durability {
    fn arg(self) -> &'static str {
        match self {
            Durability::Fsync => "fsync",
            Durability::Patchgroups => "patchgroups",
            Durability::Nothing => "none",
        }
    }
}

/// The server's and the client's scripts, written in `dir`.
struct Scripts {
    server: PathBuf,
    client: PathBuf,
    dir: PathBuf,
}

impl Scripts {
    fn write(dir: &Path) -> anyhow::Result<Scripts> {
        let (server, client) = (dir.join("mboxd.py"), dir.join("mbox_client.py"));
        std::fs::write(&server, SERVER)?;
        std::fs::write(&client, CLIENT)?;
        Ok(Scripts {
            server,
            client,
            dir: dir.to_path_buf(),
        })
    }
}

/// mboxd running, listening on `port`; stopped when dropped (SIGTERM, on
/// which it lets its last patchgroup go).
struct Server {
    child: Child,
    port: u16,
    log: PathBuf,
}

/// How long a server may take to listen, or to stop.
const PATIENCE: Duration = Duration::from_secs(30);

impl Server {
    /// mboxd over `maildir` in `durability`, run by `python` with
    /// `pythonpath` (where the `stitchfs` package is), once it listens.
    fn start(
        scripts: &Scripts,
        maildir: &Path,
        durability: Durability,
        python: &Path,
        pythonpath: &Path,
    ) -> anyhow::Result<Server> {
        let name = format!("mboxd-{}", durability.arg());
        let (port_file, log) = (
            scripts.dir.join(format!("{name}.port")),
            scripts.dir.join(format!("{name}.log")),
        );
        let _ = std::fs::remove_file(&port_file);
        let out = File::create(&log)?;
        let child = Command::new(python)
            .arg(&scripts.server)
            .args(["--durability", durability.arg(), "--port-file"])
            .arg(&port_file)
            .arg(maildir)
            .env("PYTHONPATH", pythonpath)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .current_dir(&scripts.dir)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        let mut server = Server {
            child,
            port: 0,
            log,
        };
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = server.child.try_wait()? {
                bail!("{name} exited ({status}) before listening{}", server.tail());
            }
            let port = std::fs::read_to_string(&port_file).ok();
            if let Some(port) = port.and_then(|p| p.trim().parse().ok()) {
                server.port = port;
                return Ok(server);
            }
            if Instant::now() > deadline {
                bail!("{name} did not listen within 30 s{}", server.tail());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The client with `args` after its mode (`fill`, `move`) and this
    /// server's port; what the server logged, if the client fails.
    fn client(
        &self,
        scripts: &Scripts,
        python: &Path,
        mode: &str,
        args: &[usize],
    ) -> anyhow::Result<()> {
        let mut cmd = Command::new(python);
        cmd.arg(&scripts.client)
            .arg(mode)
            .arg(self.port.to_string())
            .args(args.iter().map(usize::to_string))
            .env("PYTHONDONTWRITEBYTECODE", "1");
        run_tool(&mut cmd, &format!("the IMAP client ({mode})"))
            .map(drop)
            .with_context(|| format!("the server said:{}", self.tail()))
    }

    /// The end of the server's log, for messages.
    fn tail(&self) -> String {
        log_tail(&self.log)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SAFETY: kill has no memory effects; the pid is our child's, not
        // yet reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + PATIENCE;
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The move as phase `phase` with the server in `durability`.
pub(super) fn imap_mbox(
    run: &mut Run,
    phase: usize,
    durability: Durability,
    s: &Scale,
    inputs: &Prepared,
) -> anyhow::Result<()> {
    let scripts = Scripts::write(&inputs.dir)?;
    let (python, pythonpath) = (&inputs.interpreter, &inputs.python);
    let mut server = None;
    run.setup(phase, |root| {
        let mail = root.join("mail");
        std::fs::create_dir(&mail)?;
        let filler = Server::start(&scripts, &mail, Durability::Nothing, python, pythonpath)?;
        filler.client(&scripts, python, "fill", &[s.imap_messages, s.imap_bytes])?;
        drop(filler);
        server = Some(Server::start(
            &scripts, &mail, durability, python, pythonpath,
        )?);
        Ok(())
    })?;
    let server = server.context("no server")?;
    run.timed(phase, |root| {
        server.client(&scripts, python, "move", &[s.imap_messages])?;
        syncfs(root)?;
        Ok(s.imap_messages as f64)
    })?;
    drop(server);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Python tests of the server (`test_mboxd.py`): the protocol, the
    /// fsyncs of the unmodified server, and the patchgroup calls against a
    /// recording stand-in for the `stitchfs` package.
    #[test]
    fn the_server_passes_its_own_tests() {
        super::super::tests::python_tests("test_mboxd.py");
    }

    /// The workload's server and client, off a mount: both regimes that
    /// run anywhere move every message; patchgroups refuse to start.
    #[test]
    fn the_client_moves_every_message_and_patchgroups_need_stitchfs() {
        let python = PathBuf::from("python3");
        if Command::new(&python).arg("-V").output().is_err() {
            eprintln!("skipping: no python3");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let scripts = Scripts::write(dir.path()).unwrap();
        let empty = dir.path().join("no-package");
        std::fs::create_dir(&empty).unwrap();
        for durability in [Durability::Fsync, Durability::Nothing] {
            let mail = dir.path().join(format!("mail-{}", durability.arg()));
            std::fs::create_dir(&mail).unwrap();
            let start = || Server::start(&scripts, &mail, durability, &python, &empty).unwrap();
            let server = start();
            server
                .client(&scripts, &python, "fill", &[12, 2048])
                .unwrap();
            drop(server);
            let server = start();
            server.client(&scripts, &python, "move", &[12]).unwrap();
            // A second move finds INBOX empty, and says so.
            let e = server.client(&scripts, &python, "move", &[12]).unwrap_err();
            assert!(
                format!("{e:#}").contains("INBOX holds 0 messages, not 12"),
                "{e:#}"
            );
            let moved = std::fs::read_to_string(mail.join("Moved")).unwrap();
            assert_eq!(moved.matches("\nSubject: message ").count(), 12);
        }
        // This build's package, off stitchfs: refused before listening
        // (no pg_create in a build without patchgroups, else ENOTTY).
        let (_, package) = super::super::driver_files(dir.path()).unwrap();
        let mail = dir.path().join("mail-pg");
        std::fs::create_dir(&mail).unwrap();
        let e = Server::start(&scripts, &mail, Durability::Patchgroups, &python, &package)
            .err()
            .unwrap();
        let e = format!("{e:#}");
        assert!(
            e.contains("exited (exit status: 1) before listening")
                && e.contains("mboxd: patchgroups"),
            "{e}"
        );
    }
}
