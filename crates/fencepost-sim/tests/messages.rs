//! The stream workload: messages at a constant rate, each one's latency measured.

use fencepost_sim::{run, Scenario};

fn stream(extra: &[(&str, &str)]) -> fencepost_spec::RunReport {
    let mut options = vec![("workload", "stream"), ("message-size", "1kB"), ("message-rate", "2mbit"), ("time", "10s"), ("rate", "20mbit"), ("delay", "25ms")];
    options.extend_from_slice(extra);
    run(Scenario::from_options(options).unwrap())
}

#[test]
fn a_clean_path_delivers_every_message_in_one_way_delay() {
    let r = stream(&[]);
    assert!(r.integrity_ok && r.close_ok, "{:?}", r.error);
    // 2 Mbit/s of 1 kB messages for 10 s: one every 4 ms.
    assert_eq!(r.messages_delivered, 2_500);
    assert_eq!(r.message_latencies_ms.len(), 2_500);
    assert_eq!(r.bytes_delivered, 2_500_000);
    let p50 = r.message_latency_p50_ms.unwrap();
    let p99 = r.message_latency_p99_ms.unwrap();
    // One-way delay plus serialization at 20 Mbit/s (a message spans one or two packets).
    assert!((25.0..27.0).contains(&p50), "p50 {p50}");
    assert!(p99 < 28.0, "p99 {p99}");
    assert!(r.goodput_bps > 1.9e6 && r.goodput_bps < 2.1e6, "{}", r.goodput_bps);
}

#[test]
fn under_loss_the_tail_grows_and_duplication_shortens_it() {
    let seeds = ["1", "2", "3"];
    let p95 = |redundancy: &str| -> f64 {
        seeds
            .iter()
            .map(|seed| {
                let r = stream(&[("loss", "10%"), ("redundancy", redundancy), ("seed", seed)]);
                assert!(r.integrity_ok, "{redundancy} seed {seed}: {:?}", r.error);
                assert_eq!(r.messages_delivered, 2_500);
                r.message_latency_p95_ms.unwrap()
            })
            .sum::<f64>()
            / seeds.len() as f64
    };
    let (plain, doubled) = (p95("none"), p95("dup:100%"));
    // A lost packet costs a round trip or more; sent twice, both copies must be lost (1 %).
    assert!(plain > 75.0, "without redundancy the p95 includes recoveries: {plain}");
    assert!(doubled < plain, "duplication shortens the tail: {doubled} vs {plain}");
}
