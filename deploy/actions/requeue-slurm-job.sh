#!/bin/bash
# A pipeline-pulse action (docs/alerts.md#actions): requeues the run's SLURM job, so it starts
# again on a healthy node and the driver resumes (docs/slurm.md). The job must be requeueable
# (sbatch --requeue, or the cluster's JobRequeue=1). Inside the job the sidecar is stopped with
# it: its state directory carries the run over, and the new job's sidecar tells SlurmJobResumed.
#   command = ["/usr/local/lib/pipeline-pulse/actions/requeue-slurm-job.sh"]
set -eu
JOB=${1:-${PULSE_SLURM_JOB_ID:-}}
if [ -z "$JOB" ]; then
    echo "no SLURM job is known for this run: nothing to requeue" >&2
    exit 1
fi
echo "${PULSE_ALERT:-an alert} (${PULSE_SUMMARY:-}): requeueing SLURM job $JOB"
scontrol requeue "$JOB"
