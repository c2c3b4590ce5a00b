//! A data sender asks its peer for fewer acks once its controller has found the path's
//! rate, or earlier when it sends fast; while the controller still grows from below, acks
//! come as before.

use fencepost_sim::{run, Scenario};

fn data_packets_per_ack(options: &[(&str, &str)]) -> f64 {
    let report = run(Scenario::from_options(options.iter().copied().chain([("queue", "2MB"), ("seed", "3")])).unwrap());
    assert!(report.integrity_ok, "{}", report.to_json());
    report.data_packets_sent as f64 / report.peer_acks_sent.max(1) as f64
}

#[test]
fn a_fast_flow_is_acked_less_often_and_a_starting_one_as_before() {
    // 1 Gbit/s over 10 ms: about 850 packets in flight, far past 50,000 a second, so the
    // sender asks for an ack per 16 (an eighth of the flight, at most 16).
    // (The start, while the flight grows, has more: 5.7 per ack over 10 MB, 14.3 over 300 MB.)
    let fast = data_packets_per_ack(&[("bytes", "100MB"), ("rate", "1gbit"), ("delay", "5ms"), ("loss", "0")]);
    assert!(fast > 10.0, "{fast:.1} data packets per ack at 1 Gbit/s");
    // Losses are acked at once, asked or not: more acks, but still fewer than one per two.
    let lossy = data_packets_per_ack(&[("bytes", "100MB"), ("rate", "1gbit"), ("delay", "5ms"), ("loss", "1%")]);
    assert!(lossy > 2.5 && lossy < fast, "{lossy:.1} data packets per ack at 1 Gbit/s, 1 % loss");
    // 1 MB over 100 Mbit/s, 40 ms: the whole transfer is Startup, below 50,000 packets a
    // second: an ack per two packets, each growing the window.
    let starting = data_packets_per_ack(&[("bytes", "1MB"), ("rate", "100mbit"), ("delay", "20ms"), ("loss", "0")]);
    assert!((1.5..2.5).contains(&starting), "{starting:.1} data packets per ack in Startup");
    // 5 MB over 20 Mbit/s, 40 ms: Startup, then an eighth of about 70 packets in flight.
    let found = data_packets_per_ack(&[("bytes", "5MB"), ("rate", "20mbit"), ("delay", "20ms"), ("loss", "0")]);
    assert!(found > 3.5, "{found:.1} data packets per ack at 20 Mbit/s once the rate is found");
}

/// The acks' own path may be the narrow one: at 100 Mbit/s an ack per two data packets
/// takes 2.4 Mbit/s back (4,200 acks of 72 bytes a second, IP and UDP headers included).
/// Through 512 kbit/s the acks set the rate (20 Mbit/s for `tolerant` and `bbr`, 24 for
/// CUBIC); asking for an ack per eighth of the flight once out of Startup frees it.
#[test]
fn a_narrow_return_path_does_not_set_the_rate() {
    for cc in ["tolerant", "bbr", "cubic"] {
        let report = completed(&[("bytes", "100MB"), ("rate-up", "100mbit"), ("rate-down", "512kbit"), ("delay", "20ms"), ("queue", "1MB"), ("cc", cc), ("seed", "1")]);
        let flow = &report.flows[0];
        assert!(flow.goodput_bps >= 60e6, "{cc}: {:.1} Mbit/s", flow.goodput_bps / 1e6);
    }
}

/// One run that must deliver every byte and finish.
fn completed(options: &[(&str, &str)]) -> fencepost_sim::RunReport {
    let report = run(Scenario::from_options(options.iter().copied()).unwrap());
    assert!(report.integrity_ok && report.status == "ok", "{options:?}: {}", report.to_json());
    report
}

fn asymmetric(cc: &str, back: &str, queue: &str) -> fencepost_sim::RunReport {
    completed(&[("bytes", "10MB"), ("rate-up", "20mbit"), ("rate-down", back), ("delay", "20ms"), ("queue", queue), ("cc", cc), ("seed", "1")])
}

/// Narrower still (20 Mbit/s out, 64 or 128 kbit/s back), an ack per eighth of the flight
/// is more than the return path carries: the acks queue there and their pace set the rate
/// (1.4 and 5 Mbit/s for `tolerant` before sparser acks were tried). A trial of sparser
/// acks drains that queue and is kept; the controller searches for the rate again.
#[test]
fn acks_that_queue_on_a_very_narrow_return_path_are_thinned() {
    for (back, queue, at_least) in [("64kbit", "1MB", 6e6), ("128kbit", "1MB", 8e6), ("64kbit", "20kB", 5e6)] {
        for cc in ["tolerant", "bbr"] {
            let report = asymmetric(cc, back, queue);
            let flow = &report.flows[0];
            assert!(flow.sparser_ack_trials_kept >= 1, "{cc} over {back}: {}", report.to_json());
            assert!(flow.goodput_bps >= at_least, "{cc} over {back}, {queue} back: {:.2} Mbit/s", flow.goodput_bps / 1e6);
        }
    }
}

/// A queue of data is not a queue of acks: through a deep buffer on a symmetric path
/// sparser acks change nothing, so no trial is kept; a window-based controller (CUBIC),
/// whose own standing queue drains when acks come later, is never offered them.
#[test]
fn a_queue_of_data_keeps_the_acks_as_they_were() {
    for cc in ["tolerant", "bbr", "cubic"] {
        let report = completed(&[("bytes", "10MB"), ("rate", "20mbit"), ("delay", "20ms"), ("queue", "1MB"), ("cc", cc), ("seed", "1")]);
        let flow = &report.flows[0];
        assert_eq!(flow.sparser_ack_trials_kept, 0, "{cc}: {}", report.to_json());
    }
    let cubic = asymmetric("cubic", "64kbit", "1MB");
    assert_eq!(cubic.flows[0].sparser_ack_trials, 0, "{}", cubic.to_json());
}
