//! A fast data sender asks its peer for fewer acks; a slower one leaves acks as they were.

use fencepost_sim::{run, Scenario};

fn data_packets_per_ack(bytes: &str, rate: &str, delay: &str, loss: &str) -> f64 {
    let report = run(Scenario::from_options([("bytes", bytes), ("rate", rate), ("delay", delay), ("loss", loss), ("queue", "2MB"), ("seed", "3")]).unwrap());
    assert!(report.integrity_ok, "{}", report.to_json());
    report.data_packets_sent as f64 / report.peer_acks_sent.max(1) as f64
}

#[test]
fn a_fast_flow_is_acked_less_often_and_a_slow_one_as_before() {
    // 1 Gbit/s over 10 ms: about 850 packets in flight, far past 50,000 a second, so the
    // sender asks for an ack per 16 (an eighth of the flight, at most 16).
    // (The start, while the flight grows, has more: 5.7 per ack over 10 MB, 14.3 over 300 MB.)
    let fast = data_packets_per_ack("100MB", "1gbit", "5ms", "0");
    assert!(fast > 10.0, "{fast:.1} data packets per ack at 1 Gbit/s");
    // Losses are acked at once, asked or not: more acks, but still fewer than one per two.
    let lossy = data_packets_per_ack("100MB", "1gbit", "5ms", "1%");
    assert!(lossy > 2.5 && lossy < fast, "{lossy:.1} data packets per ack at 1 Gbit/s, 1 % loss");
    // 20 Mbit/s over 40 ms: about 70 packets in flight, 1,700 a second: an ack per two packets.
    let slow = data_packets_per_ack("5MB", "20mbit", "20ms", "0");
    assert!((1.5..2.5).contains(&slow), "{slow:.1} data packets per ack at 20 Mbit/s");
}
