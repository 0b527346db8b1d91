//! The `ctxbench` binary: parse, run, map outcomes to exit codes.

use std::process::ExitCode;

use crate::cmd::cli::{Cli, Command};
use clap::Parser;
use ctxbench_schema::error::{ClientError, RecordError, UsageError};
use ctxbench_session::corpus::CorpusError;

// std's print macros panic when the stream is closed (`ctxbench sweep 2>&1 | head -2`):
// these shadow them for the whole binary and drop what cannot be written. Results are
// never written through them; a closed stdout on a report ends the command (below).
macro_rules! eprintln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}
macro_rules! println {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

mod cmd;

use cmd::{sweep, Ending};

fn main() -> ExitCode {
    let mut cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(async {
        let (tx, rx) = tokio::sync::watch::channel(false);
        // First Ctrl-C: stop after recording what is measured. Second: exit at once.
        // Registered here, before any command runs, so no early Ctrl-C falls through to
        // the default handler.
        let sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt());
        tokio::spawn(async move {
            let Ok(mut sigint) = sigint else { return };
            if sigint.recv().await.is_some() {
                eprintln!("\ninterrupt: stopping after saving results (Ctrl-C again to quit now)");
                let _ = tx.send(true);
                if sigint.recv().await.is_some() {
                    // exit() runs no destructors: stop managed servers here.
                    ctxbench_session::launch::kill_all();
                    std::process::exit(130);
                }
            }
        });
        if let Command::Sweep(args) = &mut cli.command {
            cmd::corpora::resolve_auto(args);
        }
        match cli.command {
            Command::Sweep(args) if args.server_cmd.is_some() => {
                cmd::campaign::run(*args, rx).await
            }
            Command::Sweep(args) if cmd::corpora::split(&args.corpus).len() > 1 => {
                let corpora = cmd::corpora::split(&args.corpus);
                cmd::corpora::run(*args, corpora, rx).await
            }
            Command::Sweep(args) => sweep::run(*args, rx).await,
            Command::Overhead(args) => cmd::overhead::run(args).await.map(|()| Ending::Complete),
            Command::Report(args) => cmd::report::run(&args).map(|()| Ending::Complete),
            Command::Compare(args) => cmd::compare::run(&args),
            Command::Import(args) => cmd::import::run(&args),
            Command::Replay(args) if args.dry_run => cmd::replay_dry::run(&args),
            Command::Replay(args) => cmd::replay::run(*args, rx).await,
            Command::Completions(args) => cmd::shell::completions(&args).map(|()| Ending::Complete),
            Command::Man(args) => cmd::shell::man(&args).map(|()| Ending::Complete),
        }
    });
    match result {
        Ok(Ending::Complete) => ExitCode::SUCCESS,
        Ok(Ending::Incomplete) => ExitCode::from(1),
        Ok(Ending::Interrupted) => ExitCode::from(130),
        Ok(Ending::Regressed) => ExitCode::from(3),
        // A reader that stopped reading (`| head`) is not an error (as in ripgrep).
        Err(e) if broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            if user_mistake(&e) {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// Whether the error is the user's to fix (exit 2): a usage error, an API key the server
/// refused, a resume with other options than the file's, a corpus without text, a trace
/// that cannot be read or is invalid.
fn user_mistake(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<UsageError>().is_some()
            || matches!(
                c.downcast_ref::<ClientError>(),
                Some(ClientError::Unauthorized { .. })
            )
            || matches!(
                c.downcast_ref::<RecordError>(),
                Some(RecordError::ConfigMismatch { .. })
            )
            || c.downcast_ref::<ctxbench_trace::TraceError>().is_some()
            || matches!(
                c.downcast_ref::<CorpusError>(),
                Some(CorpusError::Empty(_) | CorpusError::Read { .. })
            )
    })
}

/// Whether the error is a write to a closed pipe.
fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
