//! `ctxbench replay --dry-run`: the trace read and validated whole, and its plan printed;
//! nothing is sent.

use anyhow::Result;

use crate::cmd::replay_args::ReplayArgs;
use crate::cmd::Ending;

/// Prints the replay's plan from the trace alone.
pub fn run(args: &ReplayArgs) -> Result<Ending> {
    let what = match args.synthetic {
        Some(_) => format!("{:?}", args.agent_params()),
        None => "trace reading".to_owned(),
    };
    anyhow::bail!("replay --dry-run: {what} is not built yet")
}
