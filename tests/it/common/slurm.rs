//! A real single-node SLURM cluster (Debian's slurm-wlm 22.05 and munge) for the tests that
//! watch batch jobs: `tests/slurm/cluster.sh` writes its configuration into a folder of the
//! test's own and starts munged, slurmctld and slurmd there, on free ports, so tests (and test
//! processes) run side by side. What its commands print is described, with real samples, in
//! `tests/testdata/slurm/README.md`.

use super::repo::repo_file;
use super::{find_in_path, poll};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
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
        if !installed("slurmctld") || !installed("munged") {
            panic!(
                "no SLURM: run `apt-get install slurm-wlm munge` (as root), or \
                 `bash scripts/install-test-peers.sh`"
            );
        }
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

    /// `squeue --json` as the sidecar reads it. SLURM 22.05 ignores `-j` (and `-t`) with
    /// `--json` and prints every job it still holds, finished ones included (for MinJobAge,
    /// 300 s here); we pass them anyway, for later versions that honour them.
    pub fn squeue_json(&self, job: u64) -> Value {
        let out = self.run("squeue", &["--json", "-t", "all", "-j", &job.to_string()]);
        serde_json::from_str(&out).expect("squeue --json prints JSON")
    }

    /// This job's record in `squeue --json`: the one whose `job_id` is `job` (an array
    /// task's record has its own `job_id`; its `array_job_id` names the array).
    pub fn job(&self, job: u64) -> Option<Value> {
        let all = self.squeue_json(job);
        let jobs = all["jobs"].as_array()?;
        jobs.iter().find(|j| j["job_id"] == job).cloned()
    }

    /// Its `job_state` (a plain string in 22.05: "PENDING", "RUNNING", "COMPLETING",
    /// "TIMEOUT", "CANCELLED", ...); `None` once SLURM has forgotten it.
    pub fn state(&self, job: u64) -> Option<String> {
        Some(self.job(job)?["job_state"].as_str()?.to_string())
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
