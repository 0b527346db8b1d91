//! `ctxbench replay` against a server (placeholder until the replay driver lands).

use anyhow::Result;

use crate::cmd::replay_args::ReplayArgs;
use crate::cmd::Ending;

/// Replays the trace against the server (not built yet: only `--dry-run` is).
pub async fn run(
    _args: ReplayArgs,
    _interrupt: tokio::sync::watch::Receiver<bool>,
) -> Result<Ending> {
    anyhow::bail!("replay: only --dry-run is built so far")
}
