//! What the rest of the sidecar may read of the run: each field, read-only. The fields are
//! private to the model, so the only way to change the run is one of its methods: the model is
//! the one writer (docs/architecture.md#one-writer).

use super::*;

impl Run {
    pub fn model_name(&self) -> &Option<String> {
        &self.progress.model_name
    }

    pub fn complete_said(&self) -> bool {
        self.progress.complete_said
    }

    pub fn partitions(&self) -> &BTreeMap<String, Partition> {
        &self.partitions
    }

    pub fn logs(&self) -> &[LogStats] {
        &self.logs
    }

    pub fn collectors(&self) -> &BTreeMap<Collector, CollectorState> {
        &self.collectors
    }

    pub fn collectors_on(&self) -> crate::collectors::Collectors {
        self.collectors_on
    }

    pub fn recent_lines(&self) -> &RecentLines {
        &self.recent_lines
    }

    pub fn outputs(&self) -> &BTreeMap<String, OutputFile> {
        &self.outputs.files
    }

    pub fn outputs_generation(&self) -> u64 {
        self.outputs.generation
    }

    pub fn output_totals(&self) -> &outputs::OutputTotals {
        &self.outputs.totals
    }

    pub fn inputs(&self) -> &BTreeMap<String, InputFile> {
        &self.outputs.inputs
    }

    pub fn output_tokens(&self) -> &BTreeMap<String, Window> {
        &self.outputs.tokens
    }

    pub fn gpu(&self) -> &Gpus {
        &self.gpu
    }

    pub fn gpu_hung_since(&self) -> Option<Seconds> {
        self.calls.gpu()
    }

    pub fn process(&self) -> &Option<ProcessState> {
        &self.process.state
    }

    pub fn server(&self) -> &Option<ServerState> {
        &self.server.state
    }

    pub fn server_log(&self) -> &ServerLogState {
        &self.server_log
    }

    pub fn server_generating_at(&self) -> Option<Seconds> {
        self.server.generating_at
    }

    pub fn server_working_at(&self) -> Option<Seconds> {
        self.server.working_at
    }

    pub fn server_seen_at(&self) -> Option<Seconds> {
        self.server.seen_at
    }

    pub fn utc_offset(&self) -> i64 {
        self.utc_offset
    }

    pub fn calls(&self) -> &Calls {
        &self.calls
    }

    pub fn refused_files(&self) -> &std::collections::BTreeSet<String> {
        &self.outputs.refused
    }

    pub fn output_files(&self) -> OutputFiles {
        self.outputs.held
    }

    pub fn history(&self) -> &history::History {
        &self.history
    }

    pub fn outputs_resumed(&self) -> &BTreeMap<String, Seconds> {
        &self.outputs.resumed
    }

    pub fn passes(&self) -> &BTreeMap<String, PassMark> {
        &self.outputs.passes
    }

    pub fn identities_stored(&self) -> usize {
        self.outputs.identities_stored
    }

    pub fn discovered(&self) -> &Option<Discovered> {
        &self.discovered.found
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    pub fn gpu_seconds(&self) -> f64 {
        self.gpu.seconds()
    }

    pub fn identity(&self) -> &Option<crate::run_identity::RunLabel> {
        &self.identity.label
    }

    pub fn run_id(&self) -> &Option<(String, u64)> {
        &self.identity.run_id
    }

    pub fn runs_started(&self) -> u64 {
        self.identity.runs_started
    }

    pub fn run_started(&self) -> &Option<RunStarted> {
        &self.identity.run_started
    }

    pub fn slurm(&self) -> &Option<slurm::SlurmJob> {
        &self.slurm
    }
}

/// Tests outside the model stage a run directly: what no source could bring about in a few
/// lines (a server in a given state, a hand-made output file's counts).
#[cfg(test)]
impl Run {
    pub fn server_mut(&mut self) -> &mut Option<ServerState> {
        &mut self.server.state
    }

    pub fn process_mut(&mut self) -> &mut Option<ProcessState> {
        &mut self.process.state
    }

    pub fn discovered_mut(&mut self) -> &mut Option<Discovered> {
        &mut self.discovered.found
    }

    pub fn gpus_mut(&mut self) -> &mut Option<GpuReading> {
        self.gpu.reading_mut()
    }

    pub fn outputs_mut(&mut self) -> &mut BTreeMap<String, OutputFile> {
        Arc::make_mut(&mut self.outputs.files)
    }

    pub fn inputs_mut(&mut self) -> &mut BTreeMap<String, InputFile> {
        Arc::make_mut(&mut self.outputs.inputs)
    }

    pub fn partitions_mut(&mut self) -> &mut BTreeMap<String, Partition> {
        Arc::make_mut(&mut self.partitions)
    }

    pub fn logs_mut(&mut self) -> &mut [LogStats] {
        &mut self.logs
    }
}
