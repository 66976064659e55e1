//! A real single-node SLURM cluster (Debian's slurm-wlm 22.05 and munge) for the tests that
//! watch batch jobs: `tests/slurm/cluster.sh` writes its configuration into a folder of the
//! test's own and starts munged, slurmctld and slurmd there, on free ports, so tests (and test
//! processes) run side by side. What its commands print is described, with real samples, in
//! `tests/testdata/slurm/README.md`. The tests ask it about one job at a time (`scontrol show
//! job`), as the sidecar does: `sdiag` then tells the sidecar's whole-queue dumps
//! (`REQUEST_JOB_INFO`) apart, as there are none of the tests' own.

use super::repo::repo_file;
use super::{find_in_path, poll};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// A running cluster; stopped (daemons, job steps and jobs) when dropped.
pub struct Cluster {
    /// The folder that holds everything: slurm.conf, state, spool, logs, the jobs' scripts.
    pub dir: PathBuf,
    /// `DIR/slurm.conf`, which every SLURM command must be given through `SLURM_CONF`.
    pub conf: PathBuf,
}

/// The daemons live in /usr/sbin, which a non-root PATH may leave out.
fn installed(name: &str) -> bool {
    find_in_path(name).is_some() || Path::new("/usr/sbin").join(name).is_file()
}

fn script(action: &str, dir: &Path) -> Output {
    Command::new("bash")
        .arg(repo_file("tests/slurm/cluster.sh"))
        .arg(action)
        .arg(dir)
        .env_remove("SLURM_CONF")
        .output()
        .expect("run tests/slurm/cluster.sh")
}

impl Cluster {
    /// Starts a cluster in `dir` and returns once its node is idle (about a second; the
    /// script gives up after 30 s and shows the daemons' logs).
    pub fn start(dir: &Path) -> Cluster {
        Cluster::start_with(dir, "")
    }

    /// [`Cluster::start`] with lines of its own added to slurm.conf (a `Prolog=`).
    pub fn start_with(dir: &Path, conf: &str) -> Cluster {
        if !installed("slurmctld") || !installed("munged") {
            panic!(
                "no SLURM: run `apt-get install slurm-wlm munge` (as root), or \
                 `bash scripts/install-test-peers.sh`"
            );
        }
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("extra.conf"), conf).unwrap();
        let out = script("start", dir);
        assert!(
            out.status.success(),
            "cluster.sh start {} failed: {}{}",
            dir.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Cluster {
            dir: dir.to_path_buf(),
            conf: dir.join("slurm.conf"),
        }
    }

    /// A SLURM client (`sbatch`, `squeue`, `scontrol`, ...) that talks to this cluster.
    pub fn command(&self, program: &str) -> Command {
        let mut command = Command::new(program);
        command.env("SLURM_CONF", &self.conf).current_dir(&self.dir);
        command
    }

    /// Runs a client to completion and returns its stdout; fails the test if it fails.
    pub fn run(&self, program: &str, args: &[&str]) -> String {
        let out = self.command(program).args(args).output().expect(program);
        assert!(
            out.status.success(),
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("UTF-8")
    }

    /// Submits `script` (a whole batch script, `#!` line included) with `sbatch --parsable
    /// ARGS`; returns the job id. The script is kept in `DIR/jobs/` and the job runs there,
    /// so its `slurm-ID.out` lands there too.
    pub fn sbatch(&self, args: &[&str], script: &str) -> u64 {
        let jobs = self.dir.join("jobs");
        std::fs::create_dir_all(&jobs).unwrap();
        let n = std::fs::read_dir(&jobs).unwrap().count();
        let path = jobs.join(format!("job-{n}.sh"));
        std::fs::write(&path, script).unwrap();
        let out = self
            .command("sbatch")
            .current_dir(&jobs)
            .arg("--parsable")
            .args(args)
            .arg(&path)
            .output()
            .expect("sbatch");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "sbatch {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // `--parsable` prints `ID` or `ID;CLUSTER`.
        let id = stdout.trim().split(';').next().unwrap_or("");
        id.parse()
            .unwrap_or_else(|_| panic!("sbatch printed {stdout:?}, not a job id"))
    }

    /// The job's record as `scontrol --local -o show job ID` prints it, times as Unix seconds
    /// (`StartTime`, `EndTime`); `None` once SLURM has forgotten it. One single-job lookup
    /// (`REQUEST_JOB_INFO_SINGLE`), as the sidecar's.
    pub fn job(&self, job: u64) -> Option<BTreeMap<String, String>> {
        let out = self
            .command("scontrol")
            .env("SLURM_TIME_FORMAT", "%s")
            .args(["--local", "-o", "show", "job", &job.to_string()])
            .output()
            .expect("scontrol");
        let text = String::from_utf8_lossy(&out.stdout);
        let id = format!("JobId={job} ");
        let line = text.lines().find(|l| l.starts_with(&id))?;
        Some(
            line.split(' ')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        )
    }

    /// Its `JobState` ("PENDING", "RUNNING", "COMPLETING", "TIMEOUT", "CANCELLED", ...);
    /// `None` once SLURM has forgotten it.
    pub fn state(&self, job: u64) -> Option<String> {
        self.job(job)?.remove("JobState")
    }

    /// Fills the queue with `n` held jobs (`sbatch --hold`), as a busy cluster's is: two
    /// submissions at a time, at the lowest priority, so that the tests running beside it keep
    /// their share of two cores (four at once slowed a real SGLang's restart past a minute).
    pub fn fill_queue(&self, n: usize) {
        let jobs = self.dir.join("held");
        std::fs::create_dir_all(&jobs).unwrap();
        let mut xargs = self
            .command("nice")
            .current_dir(&jobs)
            .args(["-n", "19", "xargs", "-P", "2", "-I{}"])
            .args(["sbatch", "--hold", "-o", "/dev/null"])
            .args(["--wrap", "sleep 1000"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("xargs sbatch");
        let list: String = (0..n).map(|i| format!("{i}\n")).collect();
        std::io::Write::write_all(&mut xargs.stdin.take().unwrap(), list.as_bytes()).unwrap();
        assert!(xargs.wait().unwrap().success(), "sbatch --hold failed");
    }

    /// Zeroes the controller's RPC counts (`sdiag -r`, as root).
    pub fn reset_rpcs(&self) {
        self.run("sdiag", &["-r"]);
    }

    /// The controller's RPCs since the last reset by type (`REQUEST_JOB_INFO`, the whole
    /// queue; `REQUEST_JOB_INFO_SINGLE`, one job): how many, and their controller time in
    /// microseconds, as `sdiag` counts them.
    pub fn rpcs(&self) -> BTreeMap<String, (u64, u64)> {
        let out = self.run("sdiag", &[]);
        let section = out
            .split("Remote Procedure Call statistics by message type")
            .nth(1)
            .and_then(|s| s.split("\n\n").next())
            .unwrap_or("");
        section
            .lines()
            .filter_map(|l| {
                let name = l.split_whitespace().next()?;
                let field = |f: &str| l.split(f).nth(1)?.split_whitespace().next()?.parse().ok();
                Some((name.to_owned(), (field("count:")?, field("total_time:")?)))
            })
            .collect()
    }

    /// Waits up to `limit` for the job to be in `state`. A time limit is enforced only every
    /// 30 s, so a 1-minute job reaches TIMEOUT 60 to 90 s after it started.
    pub fn wait_state(&self, job: u64, state: &str, limit: Duration) {
        poll(&format!("job {job} to be {state}"), limit, || {
            match self.state(job) {
                Some(s) if s == state => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let out = script("stop", &self.dir);
        if !out.status.success() {
            eprintln!("cluster.sh stop: {}", String::from_utf8_lossy(&out.stderr));
        }
    }
}
