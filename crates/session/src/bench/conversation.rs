//! `--mode conversation`: one conversation growing turn by turn up to the server's maximum.
//! Turn 0 is a fresh prompt of `--turn-tokens` (nonce at token 0); each later turn sends the
//! whole history again — every earlier prompt, the answers the server generated (its own
//! token ids where the stream carries them, else its text through the server's tokenizer)
//! and a new user turn of `--turn-tokens`. Each turn's cached count must reach the previous
//! turn's prompt plus its answer less the answer's last token (sampled, never fed back, so
//! never in the cache), within the family's allowance; a turn that falls short is flagged
//! `cache_miss` and the report names it with its length.

use super::warm_steps::{measure_warm, request, WarmSettings};
use super::{record, RunCtx, Tally};
use ctxbench_client::{Backend, Generated};
use ctxbench_schema::error::RecordError;
use ctxbench_schema::record::{Phase, Status};
use ctxbench_schema::warm::WarmInfo;

/// Runs the conversation; every turn is written as it is measured.
pub async fn run(mut ctx: RunCtx<'_>, warm: &WarmSettings<'_>) -> Result<Tally, RecordError> {
    let turn_tokens = warm.config.turn_tokens.unwrap_or(512).max(1);
    let output = u64::from(ctx.settings.output_tokens);
    let max = match warm.max_context {
        Some(m) => {
            // Each turn adds a user turn and an answer.
            let turns = (m.saturating_sub(output) / (turn_tokens + output)).max(1) as usize;
            ctx.observer.start(turns, 0);
            m
        }
        None => {
            ctx.observer.warn(
                "--mode conversation: the server does not report its maximum context; the conversation stops at the first refused turn",
            );
            u64::MAX
        }
    };
    let tally = turns(ctx.reborrow(), warm, turn_tokens, max).await?;
    ctx.observer.finish();
    Ok(tally)
}

/// The turns, until the next would not fit in `max` tokens.
async fn turns(
    ctx: RunCtx<'_>,
    warm: &WarmSettings<'_>,
    turn_tokens: u64,
    max: u64,
) -> Result<Tally, RecordError> {
    let mut tally = Tally::default();
    let RunCtx {
        backend,
        builder,
        settings,
        writer,
        observer,
        interrupt,
    } = ctx;
    let output = u64::from(settings.output_tokens);
    let added = builder.server_added();
    let mut history = builder.build(turn_tokens, 0);
    let mut expected = 0u64;
    let mut turn = 0u32;
    loop {
        let context = history.len() as u64 + added;
        if context + output > max {
            break;
        }
        if *interrupt.borrow() {
            tally.interrupted = true;
            break;
        }
        observer.sample_started(context, turn);
        let req = request(
            history.clone(),
            settings.output_tokens,
            warm.config.negative_control,
            settings.timeouts_for(context),
        );
        let info = WarmInfo {
            prefix_tokens: expected,
            new_tokens: context.saturating_sub(expected),
            expected_cached: expected,
            turn: Some(turn),
            bypass: warm.config.negative_control,
            ..Default::default()
        };
        let mut run = RunCtx {
            backend,
            builder: &mut *builder,
            settings,
            writer: &mut *writer,
            observer: &mut *observer,
            interrupt: &mut *interrupt,
        };
        let Some((s, generated)) =
            measure_warm(&mut run, warm, &req, (context, turn), info, Phase::Turn).await
        else {
            tally.interrupted = true;
            break;
        };
        // The answer, as the server generated it: its ids, else its text re-tokenized.
        let answer = match (&s.status, generated) {
            (Status::Ok, Some(g)) => {
                let a = answer_ids(g, backend).await;
                if a.is_none() {
                    observer.warn(&format!(
                        "turn {turn}: the answer could not be turned into tokens; the conversation stops here"
                    ));
                }
                a
            }
            _ => None,
        };
        let reported = s.prompt_tokens.unwrap_or(context);
        if let Some(r) = record(writer, &mut tally, observer, settings, &s)? {
            tally.stopped = Some(r);
            break;
        }
        let Some(answer) = answer else { break };
        // Cached next time: this prompt and the answer but its last token (never fed back).
        expected = reported + (answer.len() as u64).saturating_sub(1);
        history.extend(&answer);
        history.extend(builder.continuation(turn_tokens, u64::from(turn) + 1));
        turn += 1;
    }
    Ok(tally)
}

/// The generated answer as token ids: the stream's ids (llama.cpp), else the text through
/// the server's tokenizer. `None` when neither is there.
async fn answer_ids(g: Generated, backend: &dyn Backend) -> Option<Vec<u32>> {
    match g.ids {
        Some(ids) if !ids.is_empty() => Some(ids),
        _ if !g.text.is_empty() => backend.tokenize(&g.text).await.ok(),
        _ => None,
    }
}
