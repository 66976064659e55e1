//! Whose pids NVML's process lists hold, and which of those processes this sidecar can see.
//!
//! The NVIDIA driver is not aware of PID namespaces: NVML lists a GPU's processes by the
//! host's pids whatever namespace asks (NVIDIA/nvidia-docker#1483,
//! NVIDIA/gpu-monitoring-tools#63). They are the sidecar's own only where it runs in the
//! host's PID namespace. In a container's or a pod's, a listed pid names another process of
//! that namespace, or none, and the host's pids cannot be looked up to map them:
//! `/proc/PID/status`'s `NSpid` lists a process's pids from the namespace of that `/proc`
//! down to the process's own, never up. So there the lists are said to be another
//! namespace's, once, and nothing is judged from them (docs/deploy.md#what-each-deployment-sees).

use crate::model::{GpuPids, GpuReading};
pub use crate::procfs::Procfs;

/// The host's PID namespace as `/proc/self/ns/pid` names it: the kernel gives the initial
/// namespace this fixed inode number (`PROC_PID_INIT_INO`, include/linux/proc_ns.h).
const HOST_PID_NAMESPACE: &str = "pid:[4026531836]";

/// What the GPU source asks of `/proc`: whose pids NVML's lists hold, and which process each
/// listed one is.
pub trait GpuProcesses {
    /// What the pids NVML lists are here, for a reader whose pids are real: this namespace's
    /// where the sidecar runs in the host's, else another namespace's. A namespace that
    /// cannot be read is not known to be the host's.
    fn pids(&self) -> GpuPids;

    /// Names each listed process and tells it apart where the pids are this namespace's:
    /// the server's or the driver's (a descendant counts: SGLang's schedulers and vLLM's
    /// EngineCore hold the GPU memory, not the process that serves HTTP), or neither's when
    /// either is known. A process not seen here (gone since NVML listed it, hidden from this
    /// user) gets no role: it is not known to be neither's. Elsewhere nothing is looked up,
    /// since a host's pid here names another process.
    fn attribute(&self, reading: &mut GpuReading, server: Option<u32>, driver: Option<u32>);
}

impl GpuProcesses for Procfs {
    fn pids(&self) -> GpuPids {
        match self.pid_namespace() {
            Some(ns) if ns.as_os_str() == HOST_PID_NAMESPACE => GpuPids::Ours,
            _ => GpuPids::Host,
        }
    }

    fn attribute(&self, reading: &mut GpuReading, server: Option<u32>, driver: Option<u32>) {
        if reading.pids != GpuPids::Ours {
            return;
        }
        for p in reading
            .devices
            .iter_mut()
            .flat_map(|g| g.processes.iter_mut())
        {
            let Some(pids) = self.nspid(p.pid).filter(|n| n.first() == Some(&p.pid)) else {
                continue;
            };
            p.name = self.comm(p.pid).unwrap_or_default();
            p.inner_pid = (pids.len() > 1).then(|| pids[pids.len() - 1]);
            if server.is_none() && driver.is_none() {
                continue;
            }
            let role = if descends(self, p.pid, server) {
                "server"
            } else if descends(self, p.pid, driver) {
                "driver"
            } else {
                "other"
            };
            p.role = Some(role.to_owned());
        }
    }
}

/// Whether `pid` is `ancestor` or one of its descendants.
fn descends(procfs: &Procfs, mut pid: u32, ancestor: Option<u32>) -> bool {
    let Some(ancestor) = ancestor else {
        return false;
    };
    for _ in 0..64 {
        if pid == ancestor {
            return true;
        }
        match procfs.stat(pid).map(|s| s.ppid) {
            Some(parent) if parent > 1 => pid = parent,
            _ => return false,
        }
    }
    false
}

/// A fake `/proc` for the tests: each process with its parent and `NSpid`, and the
/// namespace `self/ns/pid` names.
#[cfg(test)]
pub(crate) fn fake_procfs(
    dir: &std::path::Path,
    namespace: &str,
    processes: &[(u32, u32, &str, &[u32])],
) {
    std::fs::create_dir_all(dir.join("self/ns")).unwrap();
    std::os::unix::fs::symlink(namespace, dir.join("self/ns/pid")).unwrap();
    for (pid, parent, name, pids) in processes {
        let base = dir.join(pid.to_string());
        std::fs::create_dir_all(&base).unwrap();
        std::fs::write(
            base.join("stat"),
            format!("{pid} ({name}) S {parent} {pid} {pid} 0 -1 4194560 0"),
        )
        .unwrap();
        std::fs::write(base.join("comm"), format!("{name}\n")).unwrap();
        let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
        std::fs::write(
            base.join("status"),
            format!(
                "Name:\t{name}\nTgid:\t{pid}\nPid:\t{pid}\nPPid:\t{parent}\nNSpid:\t{}\n",
                pids.join("\t")
            ),
        )
        .unwrap();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{GpuProcess, GpuSample};

    #[test]
    fn the_host_namespace_is_known_by_its_inode() {
        let dir = tempfile::tempdir().unwrap();
        fake_procfs(dir.path(), HOST_PID_NAMESPACE, &[]);
        assert_eq!(Procfs::at(dir.path()).pids(), GpuPids::Ours);
        let pod = tempfile::tempdir().unwrap();
        fake_procfs(pod.path(), "pid:[4026532719]", &[]);
        assert_eq!(Procfs::at(pod.path()).pids(), GpuPids::Host);
        let nothing = tempfile::tempdir().unwrap();
        assert_eq!(Procfs::at(nothing.path()).pids(), GpuPids::Host);
    }

    fn listing(pids: GpuPids, listed: &[u32]) -> GpuReading {
        GpuReading {
            devices: listed
                .iter()
                .enumerate()
                .map(|(i, pid)| GpuSample {
                    index: i as u32,
                    processes: vec![GpuProcess {
                        pid: *pid,
                        used_bytes: 60 << 30,
                        ..GpuProcess::default()
                    }],
                    processes_read: true,
                    ..GpuSample::default()
                })
                .collect(),
            pids,
            ..GpuReading::default()
        }
    }

    fn roles(reading: &GpuReading) -> Vec<(String, Option<String>, Option<u32>)> {
        reading
            .devices
            .iter()
            .flat_map(|g| &g.processes)
            .map(|p| (p.name.clone(), p.role.clone(), p.inner_pid))
            .collect()
    }

    #[test]
    fn a_servers_workers_are_the_servers_and_an_unseen_pid_is_nobodys() {
        let dir = tempfile::tempdir().unwrap();
        // The server (100) and its scheduler (101); the driver (200); a leftover (300) in a
        // container, where it is pid 5.
        fake_procfs(
            dir.path(),
            HOST_PID_NAMESPACE,
            &[
                (100, 1, "python3", &[100]),
                (101, 100, "sglang::schedul", &[101]),
                (200, 1, "python3", &[200]),
                (300, 1, "python3", &[300, 5]),
            ],
        );
        let procfs = Procfs::at(dir.path());
        let mut reading = listing(GpuPids::Ours, &[101, 200, 300, 400]);
        procfs.attribute(&mut reading, Some(100), Some(200));
        let role = |r: &str| Some(r.to_owned());
        assert_eq!(
            roles(&reading),
            [
                ("sglang::schedul".into(), role("server"), None),
                ("python3".into(), role("driver"), None),
                ("python3".into(), role("other"), Some(5)),
                (String::new(), None, None),
            ]
        );
    }

    #[test]
    fn host_pids_seen_from_a_container_are_not_looked_up() {
        let dir = tempfile::tempdir().unwrap();
        // In the pod, pid 101 is another process: a host pid must not be read as it.
        fake_procfs(
            dir.path(),
            "pid:[4026532719]",
            &[(100, 1, "python3", &[100]), (101, 100, "bash", &[101])],
        );
        let procfs = Procfs::at(dir.path());
        let mut reading = listing(procfs.pids(), &[101]);
        procfs.attribute(&mut reading, Some(100), None);
        assert_eq!(roles(&reading), [(String::new(), None, None)]);
    }
}
