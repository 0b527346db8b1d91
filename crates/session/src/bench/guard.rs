//! The idle guard's two steps around every measured request: wait for an idle server before
//! it (telling the observer), and flag the sample `foreign_load` with the evidence after it.
//! The reading and judging are `crate::idle`'s; the loop's observer is this module's.

use crate::idle::{IdleCheck, Waited};

/// Before a measured request: waits for the server to be idle, telling `observer` when it
/// has to wait and when the wait is over. `None` without a check.
pub async fn before_sample(
    check: Option<&IdleCheck>,
    observer: &mut dyn super::Observer,
    context: u64,
    rep: u32,
) -> Option<Waited> {
    let check = check?;
    let mut waited_for = false;
    let w = check
        .wait_idle(&mut |r| {
            waited_for = true;
            observer.waiting_for_idle(context, rep, r.active);
        })
        .await;
    if waited_for {
        observer.idle_reached(w.waited.as_secs_f64(), w.expired);
    }
    Some(w)
}

/// After a measured request that sent `requests` request(s): records the wait on the
/// sample and flags it `foreign_load` (with the evidence) when the wait ran out or the
/// checks after it show another client's work.
pub async fn after_sample(
    check: Option<&IdleCheck>,
    s: &mut crate::record::Sample,
    waited: Option<Waited>,
    requests: u64,
) {
    use crate::record::Flag;
    let (Some(check), Some(w)) = (check, waited) else {
        return;
    };
    if check.source().is_some() {
        s.idle_wait_ms = Some(w.waited.as_secs_f64() * 1000.0);
    }
    // A failed request enters no summary, and its server may be going away (one shutting
    // down holds open connections silent): nothing more is read.
    if s.status != crate::record::Status::Ok {
        return;
    }
    let generated = match &s.two_point {
        Some(t) => Some(t.a_tokens + t.b_tokens),
        None => s.output_tokens,
    };
    let served = s
        .metrics
        .as_ref()
        .and_then(|d| crate::client::metrics_vocabularies().find_map(|v| v.served(d)));
    let mut why = Vec::new();
    if w.expired {
        s.flags.push(Flag::IdleWaitExpired);
        why.push(format!(
            "the server was still busy ({} request(s)) when --idle-wait {} s ran out",
            w.before.as_ref().map_or(0, |r| r.active),
            check.wait.as_secs_f64()
        ));
    }
    why.extend(
        check
            .after(w.before.as_ref(), requests, generated, served)
            .await,
    );
    if !why.is_empty() {
        s.flags.push(Flag::ForeignLoad);
        s.foreign_load = Some(why.join("; "));
    }
}
