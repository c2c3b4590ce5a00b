//! A run on two threads (`Simulation::parallel`), and one whose sides take turns in
//! windows on one thread (the default), give the report of a run that steps through every
//! instant (`Simulation::windows(false)`), byte for byte, in every kind of run; and they
//! do run apart where they can.

use fencepost_proto::Duration;
use fencepost_sim::{OneThread, Scenario, Simulation};

fn scenario(options: &[&str]) -> Scenario {
    Scenario::from_options(options.iter().map(|o| o.split_once('=').expect("name=value"))).unwrap()
}

/// Runs `options` instant by instant, in windows on one thread and on two; asserts the
/// reports are the same and returns the share of the simulated time that ran on two threads
/// (the same share ran in windows on one).
fn same_apart(options: &[&str]) -> f64 {
    let (one, none_apart) = Simulation::new(scenario(options)).windows(false).run_timed_apart();
    assert_eq!(none_apart.total_micros(), 0, "{options:?}: ran apart without being asked");
    let (in_turn, apart_in_turn) = Simulation::new(scenario(options)).run_timed_apart();
    assert_eq!(one.to_json(), in_turn.to_json(), "{options:?}: the reports differ (windows in turn)");
    let (two, apart) = Simulation::new(scenario(options)).parallel(true).run_timed_apart();
    assert_eq!(one.to_json(), two.to_json(), "{options:?}: the reports differ (two threads)");
    assert_eq!(apart, apart_in_turn, "{options:?}: the windows differ between one thread and two");
    apart.as_secs_f64() / two.end_s
}

#[test]
fn transfers_give_the_same_report_and_run_mostly_apart() {
    for options in [
        &["bytes=20MB", "rate=100mbit", "delay=20ms", "loss=1%", "queue=1MB", "seed=1", "series=100ms"][..],
        &["bytes=10MB", "rate=50mbit", "delay=15ms", "jitter=3ms", "jitter-dist=normal", "jitter-corr=0.5", "loss=2%", "seed=2"],
        &["bytes=10MB", "rate=50mbit", "delay=15ms", "dup=5%", "corrupt=1%", "loss-model=gilbert:p=0.01,r=0.2", "seed=3"],
        &["bytes=5MB", "rate=20mbit", "delay=20ms", "loss=30%", "cc=cubic", "seed=4"],
        &["bytes=5MB", "rate=20mbit", "delay=20ms", "loss=5%", "cc=reno", "arq=window", "redundancy=dup:0.2", "seed=5"],
    ] {
        let share = same_apart(options);
        assert!(share > 0.5, "{options:?}: only {:.0} % of the run on two threads", share * 100.0);
    }
}

#[test]
fn link_events_timed_transfers_streams_and_echo_give_the_same_report() {
    for options in [
        &["bytes=10MB", "rate=50mbit", "delay=20ms", "event=1s:rate:10mbit", "event=2s:delay:40ms", "event=3s:loss:5%", "event=4s:blackout:200ms", "seed=6"][..],
        &["bytes=10MB", "rate=50mbit", "delay=20ms", "event=1s:delay:5ms:up", "seed=7"],
        &["time=3s", "rate=20mbit", "delay=10ms", "loss=1%", "seed=8", "series=250ms"],
        &["workload=stream", "time=4s", "message-rate=5mbit", "rate=10mbit", "delay=25ms", "loss=3%", "seed=9"],
        &["workload=echo", "messages=300", "rate=10mbit", "delay=20ms", "loss=10%", "seed=10", "series=100ms"],
    ] {
        same_apart(options);
    }
}

#[test]
fn shared_bottlenecks_and_staggered_starts_give_the_same_report() {
    let share = same_apart(&["flows=5", "bytes=4MB", "rate=50mbit", "delay=20ms", "queue=300kB", "loss=0.5%", "cc=tolerant", "cc=cubic", "cc=bbr", "cc=reno", "cc=tolerant", "seed=11"]);
    assert!(share > 0.3, "{:.0} % of the run on two threads", share * 100.0);
    same_apart(&["flows=4", "bytes=3MB", "rate=20mbit", "delay=10ms", "loss=1%", "start=0s", "start=0.5s", "start=1s", "start=2s", "seed=12"]);
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/scenarios/three-flows.toml");
    let share = same_apart(&[&format!("scenario={file}"), "seed=13"]);
    assert!(share > 0.3, "three-flows.toml: {:.0} % of the run on two threads", share * 100.0);
}

#[test]
fn runs_that_fail_give_the_same_report() {
    // The idle timeout ends the connection in a blackout; a run past its bound.
    for options in [
        &["bytes=20MB", "rate=20mbit", "delay=20ms", "event=2s:blackout:5s", "idle-timeout=3s", "seed=14"][..],
        &["bytes=20MB", "rate=20mbit", "delay=20ms", "event=2s:loss:100%", "idle-timeout=3s", "seed=15"],
        &["bytes=20MB", "rate=20mbit", "delay=20ms", "timeout=3s", "seed=16"],
    ] {
        let (one, _) = Simulation::new(scenario(options)).run_timed_apart();
        assert_ne!(one.status, "ok", "{options:?}: meant to fail");
        same_apart(options);
    }
}

#[test]
fn a_path_too_short_for_a_window_runs_on_one_thread() {
    // 1 ms each way: windows of 1 ms would cost more in meetings than they save.
    let options = ["bytes=5MB", "rate=20mbit", "delay=1ms", "loss=1%", "seed=17"];
    assert_eq!(same_apart(&options), 0.0);
    // And the run says so, with the lookahead it found (the path's delay each way).
    let (_, parallelism) = Simulation::new(scenario(&options)).parallel(true).run_with_parallelism();
    assert_eq!(parallelism.one_thread, Some(OneThread::ShortLookahead(Duration::from_millis(1))));
    assert!(parallelism.one_thread.unwrap().to_string().contains("1.000 ms, under the 2 ms"));
}

#[test]
fn a_run_that_splits_gives_no_reason_and_one_not_asked_none() {
    let options = ["bytes=5MB", "rate=50mbit", "delay=20ms", "seed=3"];
    let (_, parallelism) = Simulation::new(scenario(&options)).parallel(true).run_with_parallelism();
    assert_eq!(parallelism.one_thread, None);
    assert!(parallelism.apart.total_micros() > 0);
    // Not asked for two threads: windows in turn, and no reason given for staying on one.
    let (_, not_asked) = Simulation::new(scenario(&options)).run_with_parallelism();
    assert_eq!((not_asked.one_thread, not_asked.apart), (None, parallelism.apart));
    let (_, short) = Simulation::new(scenario(&["bytes=5MB", "rate=20mbit", "delay=1ms", "seed=3"])).run_with_parallelism();
    assert_eq!((short.one_thread, short.apart.total_micros()), (None, 0));
    let (_, instants) = Simulation::new(scenario(&options)).windows(false).run_with_parallelism();
    assert_eq!((instants.one_thread, instants.apart.total_micros()), (None, 0));
}
