//! The loss-based controllers against what theory says of them.

use fencepost_sim::{run, Scenario};

fn goodput(cc: &str, one_way_delay: &str, loss: f64, seed: u64) -> f64 {
    let loss = format!("{loss}%");
    let seed = seed.to_string();
    let options = [("cc", cc), ("delay", one_way_delay), ("loss-up", loss.as_str()), ("time", "60s"), ("seed", seed.as_str())];
    let report = run(Scenario::from_options(options).unwrap());
    assert!(report.integrity_ok, "{cc} {one_way_delay} {loss}: {:?}", report.error);
    report.goodput_bps
}

/// Mathis et al. (1997): a Reno sender with loss probability p gets (MSS/RTT) sqrt(3/(2p)).
#[test]
fn reno_follows_the_mathis_formula_and_tahoe_stays_below_it() {
    // The default profile's payload: a 1500-byte IP packet less the headers and the AEAD's tag.
    let mss_bits = fencepost_proto::TransportConfig::default().max_payload as f64 * 8.0;
    const SEEDS: u64 = 3;
    for (delay, rtt) in [("10ms", 0.020), ("25ms", 0.050)] {
        for p in [0.5f64, 1.0, 2.0, 3.0, 5.0] {
            let formula = mss_bits / rtt * (3.0 / (2.0 * p / 100.0)).sqrt();
            let mean = |cc: &str| (1..=SEEDS).map(|seed| goodput(cc, delay, p, seed)).sum::<f64>() / SEEDS as f64;
            let (reno, tahoe) = (mean("reno"), mean("tahoe"));
            let ratio = reno / formula;
            assert!((0.8..=1.2).contains(&ratio), "reno at {rtt} s RTT, {p} % loss: {:.2} Mbit/s, {ratio:.3} of the formula", reno / 1e6);
            assert!(tahoe < reno, "tahoe {:.2} vs reno {:.2} Mbit/s at {rtt} s RTT, {p} % loss", tahoe / 1e6, reno / 1e6);
        }
    }
}

#[test]
fn tahoe_and_reno_finish_at_thirty_and_fifty_percent_loss() {
    for cc in ["tahoe", "reno"] {
        for loss in ["30%", "50%"] {
            for arq in ["fence", "window"] {
                let options = [("cc", cc), ("arq", arq), ("loss", loss), ("delay", "10ms"), ("rate", "100mbit"), ("bytes", "2MB")];
                let report = run(Scenario::from_options(options).unwrap());
                assert!(report.integrity_ok && report.close_ok, "{cc} {arq} at {loss}: {} {:?}", report.status, report.error);
            }
        }
    }
}

#[test]
fn cubic_fills_a_clean_path_shares_it_fairly_and_is_never_slower_than_reno() {
    let alone = run(Scenario::from_options([("cc", "cubic"), ("rate", "100mbit"), ("delay", "20ms"), ("queue", "1MB"), ("time", "30s")]).unwrap());
    assert!(alone.integrity_ok && alone.goodput_bps >= 90e6, "{:.1} Mbit/s", alone.goodput_bps / 1e6);
    let pair = [("flows", "2"), ("cc", "cubic"), ("rate", "100mbit"), ("delay", "20ms"), ("queue", "500kB"), ("time", "60s"), ("start", "0s"), ("start", "5s")];
    let shared = run(Scenario::from_options(pair).unwrap());
    assert!(shared.integrity_ok, "{:?}", shared.error);
    let jain = shared.jain_index.unwrap();
    assert!(jain >= 0.95, "two CUBIC flows, the second 5 s late: Jain {jain}");
    // RFC 9438 4.3: where the cubic curve is slower than Reno would be, CUBIC follows Reno.
    for p in [0.5, 2.0] {
        let cubic = goodput("cubic", "10ms", p, 1);
        let reno = goodput("reno", "10ms", p, 1);
        assert!(cubic >= 0.95 * reno, "{p} %: cubic {:.2} vs reno {:.2} Mbit/s", cubic / 1e6, reno / 1e6);
    }
}

fn tolerant_alone(loss: &str) -> fencepost_sim::RunReport {
    let options = [("cc", "tolerant"), ("rate", "100mbit"), ("delay", "20ms"), ("queue", "2MB"), ("loss", loss), ("time", "30s")];
    let report = run(Scenario::from_options(options).unwrap());
    assert!(report.integrity_ok, "{loss}: {:?}", report.error);
    report
}

/// The default controller on 100 Mbit/s, 40 ms RTT, a queue of 4 BDP, random loss on both directions.
#[test]
fn tolerant_fills_the_path_at_any_random_loss_without_a_standing_queue() {
    let clean = tolerant_alone("0%");
    assert!(clean.goodput_bps >= 90e6, "0 %: {:.1} Mbit/s", clean.goodput_bps / 1e6);
    let queue_p95 = clean.links[0].queue_delay_p95_ms.unwrap();
    assert!(queue_p95 <= 10.0, "queueing delay p95 {queue_p95} ms, a quarter of the 40 ms RTT at most");
    for p in [10.0, 30.0, 50.0] {
        let report = tolerant_alone(&format!("{p}%"));
        let floor = 0.9 * (1.0 - p / 100.0) * 100e6;
        assert!(report.goodput_bps >= floor, "{p} %: {:.1} Mbit/s, below {:.1}", report.goodput_bps / 1e6, floor / 1e6);
        let queue_p95 = report.links[0].queue_delay_p95_ms.unwrap();
        assert!(queue_p95 <= 10.0, "{p} %: queueing delay p95 {queue_p95} ms, a quarter of the 40 ms RTT at most");
    }
}

/// TCP THERMAL's link: delay 10 ± 10 ms each way, so the RTT spans 0-40 ms and packets
/// reorder. The smallest RTT is a rare extreme here; a window of bandwidth times it
/// starved the path (2.4 Mbit/s of 20 before the controller measured the delay variation).
#[test]
fn tolerant_fills_a_path_whose_delay_varies() {
    for loss in [0.0, 10.0] {
        for seed in ["1", "2"] {
            let loss_text = format!("{loss}%");
            let options = [("cc", "tolerant"), ("rate", "20mbit"), ("delay", "10ms"), ("jitter", "10ms"), ("queue", "100pkt"), ("loss", loss_text.as_str()), ("time", "20s"), ("seed", seed)];
            let report = run(Scenario::from_options(options).unwrap());
            assert!(report.integrity_ok, "{loss} % seed {seed}: {:?}", report.error);
            let floor = 0.9 * (1.0 - loss / 100.0) * 20e6;
            assert!(report.goodput_bps >= floor, "{loss} % seed {seed}: {:.1} Mbit/s, below {:.1}", report.goodput_bps / 1e6, floor / 1e6);
        }
    }
}

/// A queue far shallower than the path's bandwidth-delay product (10 kB against 1.25 MB,
/// and 20 kB shared by two flows against 750 kB) overflows at the end of Startup, which sends at nearly
/// three times the bottleneck's rate. Those losses are the overshoot's: counted into the
/// path's own loss rate (`p̂`), they raised every later bandwidth sample by `1 / (1 − p̂)`,
/// and the flow settled a third above the bottleneck, losing a quarter of what it sent for
/// the rest of the transfer (33 % of data packets were retransmissions alone, 66 % for the pair).
#[test]
fn a_shallow_queue_overflowed_by_startup_does_not_leave_tolerant_overdriving_the_path() {
    // (flows, one-way delay, queue, bytes per flow, most retransmitted); 9.1 % and 6.6 % now
    // (the pair 13.3 % before its full buffer counted as congestion, `Bbr::overflowing`).
    for (flows, delay, queue, bytes, most) in [("1", "50ms", "10kB", "50MB", 0.15), ("2", "30ms", "20kB", "20MB", 0.25)] {
        let options = [("cc", "tolerant"), ("flows", flows), ("rate", "100mbit"), ("delay", delay), ("queue", queue), ("bytes", bytes)];
        let report = run(Scenario::from_options(options).unwrap());
        assert!(report.flows.iter().all(|f| f.integrity_ok), "{flows} flow(s): {:?}", report.error);
        let share = retransmitted_share(&report);
        assert!(share <= most, "{flows} flow(s) through {queue}: {:.1} % of data packets were retransmissions", share * 100.0);
        let delivered: u64 = report.flows.iter().map(|f| f.bytes_delivered).sum();
        let last = report.flows.iter().map(|f| f.duration_s).fold(0.0, f64::max);
        let goodput = delivered as f64 * 8.0 / last;
        assert!(goodput >= 70e6, "{flows} flow(s) through {queue}: {:.1} Mbit/s together", goodput / 1e6);
    }
}

/// Several flows that together keep a buffer far shallower than the queueing target full
/// (15 kB at 100 Mbit/s is 1.2 ms; the target is 10 ms) lose packets to its overflow in every
/// phase, calm ones included. Taken for the path's random loss, that overflow raised each
/// flow's estimate by `1 / (1 − p̂)`, the flows sent more, the buffer overflowed more: over
/// 10 s 77 % (4 flows) and 85 % (8 flows) of the data packets sent were retransmissions, and
/// the flows delivered 76.9 and 65.0 Mbit/s together. The correction now fades while a round
/// keeps the queue near the deepest it has been.
///
/// Measured at five bottleneck rates around 100 Mbit/s: how eight flows lose to one buffer
/// this small turns on the order their packets meet it, and a rate 1 % off moves one run's
/// share resent from 22 to 34 % (the link's timing a fraction of a microsecond per packet
/// off moved 100 Mbit/s's from 20 to 34 %). Now 17-19 % (4 flows) and 22-34 %, median 30 %
/// (8 flows), and 89-96 Mbit/s together.
#[test]
fn tolerant_flows_keeping_a_shallow_buffer_full_do_not_take_its_overflow_for_random_loss() {
    for (flows, median_most) in [("4", 0.25), ("8", 0.35)] {
        let mut shares: Vec<f64> = NEAR_100_MBIT
            .iter()
            .map(|&rate| {
                let options = [("cc", "tolerant"), ("flows", flows), ("rate", rate), ("delay", "20ms"), ("queue", "15kB"), ("time", "10s")];
                let case = format!("{flows} flows through 15 kB at {rate}");
                assert_overflow_not_taken_for_loss(&options, 0.45, &case)
            })
            .collect();
        shares.sort_by(f64::total_cmp);
        let median = shares[shares.len() / 2];
        assert!(median <= median_most, "{flows} flows through 15 kB: median {:.1} % resent ({shares:.3?})", median * 100.0);
    }
}

/// Bottleneck rates around 100 Mbit/s, for results that a small change of timing moves.
const NEAR_100_MBIT: [&str; 5] = ["97mbit", "99mbit", "100mbit", "101mbit", "103mbit"];

/// Retransmissions as a share of all the data packets the run's flows sent.
fn retransmitted_share(report: &fencepost_spec::RunReport) -> f64 {
    let sent: u64 = report.flows.iter().map(|f| f.data_packets_sent).sum();
    let resent: u64 = report.flows.iter().map(|f| f.retransmissions).sum();
    resent as f64 / sent as f64
}

/// The flows `options` describe resent at most `most` of their data packets and delivered
/// at least 85 Mbit/s together. Returns the share resent.
fn assert_overflow_not_taken_for_loss(options: &[(&str, &str)], most: f64, case: &str) -> f64 {
    let report = run(Scenario::from_options(options.iter().copied()).unwrap());
    assert!(report.flows.iter().all(|f| f.integrity_ok), "{case}: {:?}", report.error);
    let share = retransmitted_share(&report);
    assert!(share <= most, "{case}: {:.1} % of data packets were retransmissions", share * 100.0);
    let total: f64 = report.flows.iter().map(|f| f.goodput_bps).sum();
    assert!(total >= 85e6, "{case}: {:.1} Mbit/s together", total / 1e6);
    share
}

/// The same with jitter: 1 ms of it spreads a round's RTTs over more than the 2.4 ms that
/// 30 kB holds at 100 Mbit/s, and with that spread left in the queue peak the buffer read as
/// a deep one, whose rule never fades the correction for a queue this small: 8 flows then
/// resent 85-86 % of what they sent and delivered 71-73 Mbit/s together (seeds 1-3).
/// 24-58 % and 93 Mbit/s now.
#[test]
fn tolerant_flows_keeping_a_shallow_buffer_full_through_jitter_do_not_take_its_overflow_for_random_loss() {
    for seed in ["1", "2", "3"] {
        let options = [("cc", "tolerant"), ("flows", "8"), ("rate", "100mbit"), ("delay", "20ms"), ("jitter", "1ms"), ("queue", "30kB"), ("time", "15s"), ("seed", seed)];
        assert_overflow_not_taken_for_loss(&options, 0.7, &format!("8 flows through 30 kB, 1 ms jitter, seed {seed}"));
    }
}

/// More flows than the bottleneck holds at their smallest windows: 40 flows of at least 8
/// packets each through 10 Mbit/s x 40 ms and 100 kB (about 100 packets of path and
/// queue). Flows that took their minimum RTT from the full queue see no queue; their `p̂`
/// followed the loss up, their estimate followed `p̂` (corrected up to 10 times), and the
/// 40 delivered 1.0 Mbit/s together, 91 % of their data packets resent. The correction now
/// stops at 70 % loss. Over five bottleneck rates around 10 Mbit/s (one run moves by a
/// fifth with a rate 1 % off): 4.5-7.1 Mbit/s together, mean 6.2, 74-77 % resent (CUBIC
/// at 10 Mbit/s: 9.5, 15 %).
#[test]
fn more_tolerant_flows_than_a_bottleneck_holds_do_not_collapse_it() {
    let runs: Vec<(f64, f64)> = ["9.7mbit", "9.9mbit", "10mbit", "10.1mbit", "10.3mbit"]
        .iter()
        .map(|&rate| {
            let options = [("cc", "tolerant"), ("flows", "40"), ("rate", rate), ("delay", "20ms"), ("queue", "100kB"), ("time", "10s"), ("seed", "1")];
            let report = run(Scenario::from_options(options).unwrap());
            assert!(report.flows.iter().all(|f| f.integrity_ok), "{}", report.to_json());
            let together: f64 = report.flows.iter().map(|f| f.goodput_bps).sum();
            let resent = retransmitted_share(&report);
            assert!(together >= 3e6 && resent <= 0.85, "at {rate}, 40 flows delivered {:.2} Mbit/s together, {:.0} % resent", together / 1e6, resent * 100.0);
            (together, resent)
        })
        .collect();
    let mean = runs.iter().map(|r| r.0).sum::<f64>() / runs.len() as f64;
    assert!(mean >= 5e6, "40 flows delivered {:.2} Mbit/s together on average ({runs:.3?})", mean / 1e6);
}

/// Half the packets lost each way, and a little jitter. The jitter holds a packet sent just
/// before a retransmission behind it, and an ack written on that packet's arrival echoes a
/// timestamp older than the retransmission: the retransmission that arrived looked
/// needless. On that alone the reordering thresholds widened to their largest, lost packets
/// stayed counted in flight for two round trips, the window filled with them, and the rate
/// sank round after round: 20 MB took 14-23 s (7-11 Mbit/s) with 0.5 ms of jitter, where
/// the same path without it takes 2.6. And in Startup's first rounds the delay variation,
/// averaged up from zero, was a fifth of the jitter, which then read as a queue: with 2 ms
/// of it, Startup ended at 4 Mbit/s on one seed of three, and 20 MB took 35 s.
#[test]
fn tolerant_keeps_its_rate_through_heavy_random_loss_and_a_little_jitter() {
    // Seeds 1-4 were 7-11 Mbit/s with 0.5 ms of jitter and 4-22 with 2 ms; 36-74 now. How
    // Startup ends at 50 % loss varies from seed to seed, so the mean carries the bound.
    for jitter in ["0.5ms", "2ms"] {
        let goodputs: Vec<f64> = ["1", "2", "3", "4"]
            .into_iter()
            .map(|seed| {
                let options = [("cc", "tolerant"), ("rate", "100mbit"), ("delay", "10ms"), ("jitter", jitter), ("loss", "50%"), ("bytes", "20MB"), ("seed", seed)];
                let report = run(Scenario::from_options(options).unwrap());
                assert!(report.integrity_ok && report.status == "ok", "{jitter} seed {seed}: {:?}", report.error);
                report.goodput_bps / 1e6
            })
            .collect();
        let mean = goodputs.iter().sum::<f64>() / goodputs.len() as f64;
        assert!(mean >= 40.0 && goodputs.iter().all(|&g| g >= 25.0), "{jitter}: {goodputs:.1?} Mbit/s");
    }
}

/// Heavy loss each way on a path whose delay varies enough to reorder packets: losses are
/// then found by the time threshold, up to two round trips after they were sent, and until
/// then they count in flight. Without room in the window for them the window ran out before
/// the path was full and the rate sank: at 30 % loss, 51.5 Mbit/s on one seed of four with
/// 1 ms of normally distributed jitter, 41.2 on one with 2 ms spread evenly (71.6-84.3 on
/// the others); at 60 % with 5 ms spread evenly, 1.9-14.3 Mbit/s on all four (44.9-59.1 now).
#[test]
fn tolerant_keeps_its_rate_at_heavy_loss_where_losses_are_found_late() {
    for (jitter, shape, loss, bytes, floor) in [("1ms", "normal", "30%", "60MB", 65.0), ("2ms", "uniform", "30%", "60MB", 65.0), ("5ms", "uniform", "60%", "40MB", 35.0)] {
        for seed in ["1", "2", "3", "4"] {
            let options = [("cc", "tolerant"), ("rate", "100mbit"), ("delay", "20ms"), ("jitter", jitter), ("jitter-dist", shape), ("loss", loss), ("bytes", bytes), ("seed", seed)];
            let report = run(Scenario::from_options(options).unwrap());
            assert!(report.integrity_ok && report.status == "ok", "{jitter} {shape} {loss} seed {seed}: {:?}", report.error);
            let mbps = report.goodput_bps / 1e6;
            assert!(mbps >= floor, "{jitter} {shape} {loss} seed {seed}: {mbps:.1} Mbit/s");
        }
    }
}

fn dumbbell(ccs: [&str; 2], starts: [&str; 2]) -> fencepost_sim::RunReport {
    dumbbell_at(ccs, starts, "100mbit")
}

fn dumbbell_at(ccs: [&str; 2], starts: [&str; 2], rate: &str) -> fencepost_sim::RunReport {
    let options = [
        ("flows", "2"),
        ("cc", ccs[0]),
        ("cc", ccs[1]),
        ("start", starts[0]),
        ("start", starts[1]),
        ("rate", rate),
        ("delay", "20ms"),
        ("queue", "500kB"),
        ("time", "60s"),
        ("series", "1s"),
    ];
    let report = run(Scenario::from_options(options).unwrap());
    assert!(report.flows.iter().all(|f| f.integrity_ok), "{ccs:?}: {:?}", report.error);
    report
}

#[test]
fn tolerant_shares_a_bottleneck_with_cubic_and_with_itself() {
    let against_cubic = dumbbell(["tolerant", "cubic"], ["0s", "0s"]);
    let jain = against_cubic.jain_index.unwrap();
    assert!(jain >= 0.9, "against CUBIC: Jain {jain:.3}");
    let pair = dumbbell(["tolerant", "tolerant"], ["0s", "0s"]);
    let jain = pair.jain_index.unwrap();
    assert!(jain >= 0.95, "two tolerant flows: Jain {jain:.3}");
}

/// Several `tolerant` flows starting together through a deep queue. A flow squeezed by
/// others that hold more queued than its allowance (two that had a congestion cut as
/// Startup overflowed the queue, and so competed with BBR's window) used to keep shrinking:
/// five through 500 kB at 50 Mbit/s got 4.1 to 17.5 Mbit/s (Jain 0.73). Among twenty, the
/// queue refilling after their ProbeRTTs read as a longer path, and the flows that took it
/// for their minimum RTT kept more than their share (3.0 to 12.5 Mbit/s, Jain 0.73).
#[test]
fn tolerant_flows_starting_together_share_a_deep_queue() {
    // (flows, bottleneck and its rate in bit/s, one-way delay, queue); Jain 0.93 and 0.98 now.
    for (flows, rate, link_bps, delay, queue) in [("5", "50mbit", 50e6, "20ms", "500kB"), ("20", "100mbit", 100e6, "10ms", "5MB")] {
        let options = [("cc", "tolerant"), ("flows", flows), ("rate", rate), ("delay", delay), ("queue", queue), ("time", "20s")];
        let report = run(Scenario::from_options(options).unwrap());
        assert!(report.flows.iter().all(|f| f.integrity_ok), "{flows} flows: {:?}", report.error);
        let jain = report.jain_index.unwrap();
        let goodputs: Vec<String> = report.flows.iter().map(|f| format!("{:.1}", f.goodput_bps / 1e6)).collect();
        assert!(jain >= 0.9, "{flows} flows through {queue}: Jain {jain:.2} (Mbit/s: {})", goodputs.join(" "));
        let total: f64 = report.flows.iter().map(|f| f.goodput_bps).sum();
        assert!(total >= 0.9 * link_bps, "{flows} flows through {queue}: {:.1} Mbit/s together", total / 1e6);
    }
}

/// Many `tolerant` flows starting together, each fast enough (above 24 Mbit/s) that BBR's
/// send quanta in its competing window are a millisecond of its own rate: every term of
/// that window then grew with the flow's estimate, any split kept itself, and twenty
/// through 1 Gbit/s x 2 ms got 18 to 241 Mbit/s (Jain 0.42), fifty 7 to 58 (0.71). Now
/// 0.98 and 0.95. Sixteen slower ones through 1 MB at 100 Mbit/s x 40 ms, where the quanta
/// were two packets for every flow already, are held to the same bound (0.90 before, 0.94).
#[test]
fn many_fast_tolerant_flows_share_a_bottleneck() {
    for (flows, rate, link_bps, delay, queue, time) in [
        ("20", "1gbit", 1e9, "1ms", "2000pkt", "10s"),
        ("50", "1gbit", 1e9, "1ms", "2000pkt", "10s"),
        ("16", "100mbit", 100e6, "20ms", "1MB", "30s"),
    ] {
        let options = [("cc", "tolerant"), ("flows", flows), ("rate", rate), ("delay", delay), ("queue", queue), ("time", time)];
        let report = run(Scenario::from_options(options).unwrap());
        assert!(report.flows.iter().all(|f| f.integrity_ok), "{flows} flows: {:?}", report.error);
        let goodputs: Vec<String> = report.flows.iter().map(|f| format!("{:.1}", f.goodput_bps / 1e6)).collect();
        let jain = report.jain_index.unwrap();
        assert!(jain >= 0.9, "{flows} flows through {rate}: Jain {jain:.3} (Mbit/s: {})", goodputs.join(" "));
        let total: f64 = report.flows.iter().map(|f| f.goodput_bps).sum();
        assert!(total >= 0.9 * link_bps, "{flows} flows through {rate}: {:.1} Mbit/s together", total / 1e6);
    }
}

/// A second flow joins 5 s after the first, over five bottleneck rates around 100 Mbit/s:
/// in one run a 5 s window's share moves by ten points with a rate 1 % off (38 to 61 % in
/// the worst windows), so each run's windows are held to 30-70 % and their mean over the
/// five rates to 40-60 % (now 48-56 %).
#[test]
fn a_tolerant_flow_joining_a_running_one_has_its_share_within_five_seconds() {
    // From 5 s after it joined until the first flow stops writing, every 5 s window.
    let windows: Vec<usize> = (10..60).step_by(5).collect();
    let mut sums = vec![0.0; windows.len()];
    for rate in NEAR_100_MBIT {
        let report = dumbbell_at(["tolerant", "tolerant"], ["0s", "5s"], rate);
        let (first, second) = (&report.flows[0].goodput_series_bps, &report.flows[1].goodput_series_bps);
        for (sum, &window) in sums.iter_mut().zip(&windows) {
            let mean = |series: &Vec<f64>| series[window..window + 5].iter().sum::<f64>() / 5.0;
            let (a, b) = (mean(first), mean(second));
            let share = b / (a + b);
            assert!((0.3..=0.7).contains(&share), "{rate}, {window}-{} s: the joining flow has {:.0} % ({:.1} vs {:.1} Mbit/s)", window + 5, share * 100.0, b / 1e6, a / 1e6);
            *sum += share;
        }
    }
    for (sum, window) in sums.iter().zip(windows) {
        let share = sum / NEAR_100_MBIT.len() as f64;
        assert!((0.4..=0.6).contains(&share), "{window}-{} s: the joining flow has {:.0} % on average", window + 5, share * 100.0);
    }
}

/// At 50 and 60 % random loss each way (the far end of what fencepost is for), a 5 MB
/// transfer over 20 Mbit/s, 10 ms, nine seeds: the median time to completion, handshake
/// included, stays within 1.4 times what the link's surviving capacity needs (5 MB at
/// 10 and at 8 Mbit/s: 4 and 5 s). Two probes per retransmission timeout, and one Initial
/// per handshake attempt, took 7.4 and 15.3 s (medians; 13.6 and 179 s at worst): a probe
/// comes back one time in four at 50 %, so the timer backed off to a second at a time.
#[test]
fn a_transfer_through_half_the_packets_lost_each_way_is_not_held_up_by_its_timers() {
    for (loss, surviving_bps) in [("50%", 10e6), ("60%", 8e6)] {
        let mut times: Vec<f64> = (1..=9)
            .map(|seed| {
                let seed = seed.to_string();
                let options = [("bytes", "5MB"), ("rate", "20mbit"), ("delay", "10ms"), ("loss", loss), ("seed", seed.as_str())];
                let report = run(Scenario::from_options(options).unwrap());
                assert!(report.integrity_ok, "{loss} seed {seed}: {:?}", report.error);
                report.end_s
            })
            .collect();
        times.sort_by(f64::total_cmp);
        let (median, bound) = (times[times.len() / 2], 1.4 * 5e6 * 8.0 / surviving_bps);
        assert!(median <= bound, "{loss}: median {median:.1} s, above {bound:.1} s; every seed: {times:?}");
    }
}

/// After the last byte arrives, closing (each side's FIN and its ack) and the handshake
/// before take little time even at 60 % loss each way: a timeout over a stream's end sends
/// every probe the measured loss calls for, copies of the tail included, and the receiver
/// acks each. With one or two probes per timeout, backed off to a second, 10 MB delivered
/// in 3-4 s took up to 21 s to close (median over 12 seeds 1.5 s beyond the data, worst 16.8).
#[test]
fn at_sixty_percent_loss_a_transfer_closes_soon_after_its_last_byte() {
    let mut beyond: Vec<f64> = (1..=12)
        .map(|seed| {
            let seed = seed.to_string();
            let options = [("bytes", "10MB"), ("rate", "100mbit"), ("delay", "20ms"), ("loss", "60%"), ("seed", seed.as_str())];
            let report = run(Scenario::from_options(options).unwrap());
            assert!(report.integrity_ok, "seed {seed}: {:?}", report.error);
            let flow = &report.flows[0];
            report.end_s - flow.duration_s
        })
        .collect();
    beyond.sort_by(f64::total_cmp);
    let (median, worst) = (beyond[beyond.len() / 2], beyond[beyond.len() - 1]);
    assert!(median <= 1.0 && worst <= 3.0, "seconds beyond the data: {beyond:?}");
}

/// `tolerant`'s Startup ends when the path is full, not when heavy random loss makes the
/// estimate look flat. At 60 % loss each way over a 200 ms round trip a round's rate
/// sample rests on a few packets and fewer acks; three rounds without a lucky sample
/// ended Startup at half a Mbit/s of a 50 Mbit/s path on 2 seeds in 40, and 1 MB took
/// 32-36 s there against 6-12 s on the rest. At 30 % loss a loss estimate from a dozen
/// packets (one lost) made a round of 40 % look like a full path's overflow: 5 MB over
/// 50 ms took 7.8 s on one seed in 20, against 2.6 s for the median.
#[test]
fn heavy_random_loss_does_not_end_tolerants_startup_early() {
    let longest = |options: &[(&str, &str)], seeds: u64| {
        (1..=seeds)
            .map(|seed| {
                let seed = seed.to_string();
                let mut options = options.to_vec();
                options.push(("seed", seed.as_str()));
                let report = run(Scenario::from_options(options.clone()).unwrap());
                assert!(report.integrity_ok, "{options:?}: {:?}", report.error);
                (report.flows[0].duration_s, seed)
            })
            .fold((0.0, String::new()), |a, b| if b.0 > a.0 { b } else { a })
    };
    let (worst, seed) = longest(&[("bytes", "1MB"), ("rate", "50mbit"), ("delay", "100ms"), ("loss", "60%")], 40);
    assert!(worst < 16.0, "60 %, 200 ms: seed {seed} took {worst:.1} s");
    let (worst, seed) = longest(&[("bytes", "5MB"), ("rate", "50mbit"), ("delay", "50ms"), ("loss", "30%")], 20);
    assert!(worst < 5.0, "30 %, 100 ms: seed {seed} took {worst:.1} s");
}

/// A path that gets much longer mid-transfer (a route change: 40 ms round trip to 400,
/// or 10 ms to 300) is measured again within a few round trips, not 10 s later: the
/// window sized by the old minimum carried a fifth of the bandwidth, the estimate aged
/// down to match, and 10 MB at 20 Mbit/s took 47 s (50 MB at 100 Mbit/s: 68 s). Flows
/// sharing a queue are left as they were (see `note_path_length` in bbr.rs).
#[test]
fn a_path_that_gets_much_longer_is_measured_again_within_a_few_round_trips() {
    for (rate, bytes, before, after, bound) in [("20mbit", "10MB", "20ms", "200ms", 9.0), ("100mbit", "50MB", "5ms", "150ms", 9.0)] {
        let event = format!("1s:delay:{after}");
        let options = [("bytes", bytes), ("rate", rate), ("delay", before), ("event", event.as_str())];
        let report = run(Scenario::from_options(options).unwrap());
        assert!(report.integrity_ok, "{options:?}: {:?}", report.error);
        let took = report.flows[0].duration_s;
        assert!(took < bound, "{bytes} at {rate}, {before} then {after}: {took:.1} s");
    }
}

/// A path whose delay rises by less than the lengthened-path step (40 to 60 and to 100 ms
/// of RTT) left `tolerant`'s window, sized by the old minimum with a quarter of a product
/// to spare, short of the new one: what it delivered read as less bandwidth, the window
/// shrank with the estimate, and the rate fell to 2.5 Mbit/s of 20 until the minimum
/// expired 10 s later (50 MB: 30.6 and 38.5 s, where an unchanged path takes 21). The
/// minimum is now measured again once the estimate starts to fall behind such a rise.
/// The bound on time is 1.12x the unchanged path's: 50 ms took 23.4 s (1.095x) before
/// ProbeRTT drained to half a product at the last round's delivery rate, and 23.6 s
/// (1.10x) since (the window-bound round before it delivered half the estimate, so its
/// 200 ms carry less): the price of taking a fade's queue out of the minimum on a
/// cellular trace (the ATT LTE uplink's mean RTT 1077 -> 604 ms; `docs/congestion.md`,
/// point 9).
#[test]
fn a_path_a_little_longer_does_not_starve_tolerant_until_the_minimum_expires() {
    let take = |event: Option<&str>| {
        let mut options = vec![("bytes", "50MB"), ("rate", "20mbit"), ("delay", "20ms"), ("series", "2s")];
        options.extend(event.map(|e| ("event", e)));
        let report = run(Scenario::from_options(options).unwrap());
        assert!(report.integrity_ok, "{event:?}: {:?}", report.error);
        report
    };
    let unchanged = take(None).flows[0].duration_s;
    for event in ["3s:delay:30ms", "3s:delay:50ms"] {
        let report = take(Some(event));
        let flow = &report.flows[0];
        assert!(flow.duration_s < 1.12 * unchanged, "{event}: {:.1} s, {unchanged:.1} s unchanged", flow.duration_s);
        let slowest = flow.goodput_series_bps[1..flow.goodput_series_bps.len() - 1].iter().copied().fold(f64::MAX, f64::min);
        assert!(slowest > 8e6, "{event}: {:.1} Mbit/s in the slowest 2 s", slowest / 1e6);
    }
}

/// Flows that together keep a buffer no deeper than their queueing target full lose its
/// overflow in every round, and a test of that loss against each flow's `p̂` (which had
/// learned the overflow in Startup, 0.13-0.41 on a path that loses nothing) never found it
/// congestion: no flow cut, each kept about the rate it left Startup with. Ten flows through
/// 60 kB at 100 Mbit/s x 40 ms: Jain 0.66-0.79 at the five rates, 18-21 % of the data
/// packets resent; eight through 25 kB at 20 Mbit/s: 0.81-0.83. Now a buffer held near its
/// peak for three rounds makes a round's loss its overflow (`Bbr::overflowing`), and the
/// flows cut and grow back by the same packets each: 0.94-0.98 with 7-13 % resent, and
/// 0.96-0.99. Buffers of up to twice the target (half the round trip) too: twenty flows
/// through 250 kB (20 ms) 0.81-0.89 and through 150 kB 0.71-0.91 with 16-17 % resent when
/// the rule stopped at the target.
#[test]
fn tolerant_flows_keeping_a_buffer_no_deeper_than_their_target_full_share_it() {
    let cases = [
        ("10", NEAR_100_MBIT.as_slice(), "60kB", 0.15),
        ("8", ["19mbit", "20mbit", "21mbit"].as_slice(), "25kB", 0.3),
        ("20", ["97mbit", "100mbit", "103mbit"].as_slice(), "150kB", 0.1),
        ("20", ["97mbit", "100mbit", "103mbit"].as_slice(), "250kB", 0.15),
    ];
    for (flows, rates, queue, most_resent) in cases {
        for &rate in rates {
            let options = [("cc", "tolerant"), ("flows", flows), ("rate", rate), ("delay", "20ms"), ("queue", queue), ("time", "30s")];
            let report = run(Scenario::from_options(options).unwrap());
            let case = format!("{flows} flows through {queue} at {rate}");
            assert!(report.flows.iter().all(|f| f.integrity_ok), "{case}: {:?}", report.error);
            let jain = report.jain_index.unwrap();
            let goodputs: Vec<f64> = report.flows.iter().map(|f| f.goodput_bps / 1e6).collect();
            assert!(jain >= 0.9, "{case}: Jain {jain:.3} ({goodputs:.1?} Mbit/s)");
            let share = retransmitted_share(&report);
            assert!(share <= most_resent, "{case}: {:.1} % of data packets were retransmissions", share * 100.0);
        }
    }
}

/// A return path that carries nothing for 60 ms of every 160 and then delivers the acks it
/// held at once (a link that aggregates, as Wi-Fi and cellular ones do): `tolerant`'s
/// window, the model's product and a small allowance, ran out in each hold and the path
/// went idle, 12.1 and 13.1 Mbit/s of 20 at 5 and 20 ms each way, and ten flows through 100
/// Mbit/s took 69 Mbit/s together (Jain 0.82). The window now makes room for the longest
/// recent hold (`Bbr::note_ack_gap`): 18.0, 18.4, and 94 Mbit/s (Jain 0.94).
#[test]
fn tolerant_keeps_sending_through_a_return_path_that_holds_its_acks() {
    let dir = std::env::temp_dir().join(format!("fencepost-sim-held-acks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("holds-60ms-of-160.trace");
    // Five delivery opportunities a millisecond for 100 ms, none for the 60 after.
    let mut lines: Vec<String> = (0..100).flat_map(|ms| std::iter::repeat_n(ms.to_string(), 5)).collect();
    lines.push("160".into());
    std::fs::write(&trace, lines.join("\n") + "\n").unwrap();
    let trace = trace.to_str().unwrap();
    for delay in ["5ms", "20ms"] {
        let options = [("rate-up", "20mbit"), ("trace-down", trace), ("delay", delay), ("queue", "100kB"), ("time", "20s")];
        let report = run(Scenario::from_options(options).unwrap());
        assert!(report.integrity_ok, "{delay}: {:?}", report.error);
        assert!(report.goodput_bps >= 17e6, "{delay} each way: {:.1} Mbit/s of 20", report.goodput_bps / 1e6);
    }
    let options = [("flows", "10"), ("rate-up", "100mbit"), ("trace-down", trace), ("delay", "10ms"), ("queue", "500kB"), ("time", "30s")];
    let report = run(Scenario::from_options(options).unwrap());
    assert!(report.flows.iter().all(|f| f.integrity_ok), "ten flows: {:?}", report.error);
    let total: f64 = report.flows.iter().map(|f| f.goodput_bps).sum();
    let jain = report.jain_index.unwrap();
    assert!(total >= 85e6 && jain >= 0.9, "ten flows: {:.1} Mbit/s of 100 together, Jain {jain:.2}", total / 1e6);
    let _ = std::fs::remove_dir_all(&dir);
}

/// More flows on a slow link than its product holds packets: five of 2 MB through 200
/// kbit/s with 50 ms each way and no queue limit (the product is under two packets, each
/// flow's floor four). Their floors keep a queue no flow's ProbeRTT drains, and each aged
/// minimum RTT took that queue in, so windows grew with the queue they made: 8.5 s of RTT
/// on average, one flow 14 s with 1.8 times the others' rate (Jain 0.93). An aged minimum
/// now rises a quarter (or 5 ms) at a time (`AGED_MIN_RTT_RISE`): 2.7 s, Jain 1.00 (`bbr` 2.4 s).
#[test]
fn tolerant_flows_on_a_slow_link_do_not_let_their_minimum_rtt_follow_the_queue_up() {
    for loss in ["0", "0.1"] {
        let options = [("bytes", "2MB"), ("rate", "200kbit"), ("delay", "50ms"), ("flows", "5"), ("loss", loss), ("seed", "102"), ("timeout", "2000s")];
        let report = run(Scenario::from_options(options).unwrap());
        assert!(report.flows.iter().all(|f| f.status == "ok" && f.integrity_ok), "loss {loss}: {:?}", report.error);
        let rtts: Vec<f64> = report.flows.iter().map(|f| f.rtt_mean_ms.expect("a flow that delivered has RTT samples")).collect();
        let mean = rtts.iter().sum::<f64>() / rtts.len() as f64;
        let goodputs: Vec<f64> = report.flows.iter().map(|f| f.goodput_bps / 1e3).collect();
        let jain = report.jain_index.unwrap();
        assert!(mean < 4_000.0, "loss {loss}: mean RTT {mean:.0} ms ({rtts:.0?})");
        assert!(jain >= 0.97, "loss {loss}: Jain {jain:.3} ({goodputs:.1?} kbit/s)");
    }
}
