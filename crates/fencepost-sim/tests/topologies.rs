//! Many flows, shared bottlenecks, scenario files and link events.

use fencepost_sim::{run, Scenario};

fn scenario(options: &[(&str, &str)]) -> Scenario {
    Scenario::from_options(options.iter().copied()).unwrap()
}

#[test]
fn two_tahoe_flows_share_a_dumbbell_fairly_and_fill_it() {
    let options = [("topology", "dumbbell:2"), ("cc", "tahoe"), ("rate", "20mbit"), ("delay", "10ms"), ("time", "60s")];
    let report = run(scenario(&options));
    assert_eq!(report.flows.len(), 2);
    for flow in &report.flows {
        assert!(flow.integrity_ok && flow.close_ok, "flow {}: {:?}", flow.flow, flow.error);
        assert!(flow.goodput_bps > 5e6, "flow {} got {:.2} Mbit/s", flow.flow, flow.goodput_bps / 1e6);
    }
    let jain = report.jain_index.unwrap();
    assert!(jain >= 0.9, "Jain index {jain}");
    let bottleneck = report.links.iter().find(|l| l.link == "bottleneck" && l.direction == "up").unwrap();
    let utilisation = bottleneck.utilisation.unwrap();
    assert!(utilisation >= 0.8, "bottleneck utilisation {utilisation}");
    assert!(bottleneck.queue_delay_p95_ms.unwrap() >= bottleneck.queue_delay_p50_ms.unwrap());
    assert_eq!(report.link_up.offered, bottleneck.counters.offered, "the top of the report is the bottleneck");
    // Same seed, same bytes.
    assert_eq!(report.to_json(), run(scenario(&options)).to_json());
}

#[test]
fn a_blackout_in_the_middle_of_a_transfer_is_survived_and_reported() {
    // 30 MB at 10 Mbit/s is about 25 s of sending; the link goes dark from 10 s to 20 s.
    let report = run(scenario(&[("bytes", "30MB"), ("rate", "10mbit"), ("delay", "10ms"), ("queue", "100pkt"), ("event", "10s:blackout:10s"), ("seed", "3")]));
    assert!(report.integrity_ok && report.close_ok, "{:?}", report.error);
    assert!(report.duration_s > 30.0, "the ten dark seconds cost time: {}", report.duration_s);
    for direction in ["up", "down"] {
        let link = report.links.iter().find(|l| l.direction == direction).unwrap();
        assert!(link.counters.blackout_dropped > 0, "{direction}: {link:?}");
        assert_eq!(link.events, vec!["at 10.000 s: blackout for 10.000 s".to_string()]);
    }
    assert!(report.to_text().contains("blackout for 10.000 s"));
    // A rate change is reported too, and slows the transfer.
    let slower = run(scenario(&[("bytes", "5MB"), ("rate", "10mbit"), ("event", "1s:rate:2mbit:up")]));
    let fast = run(scenario(&[("bytes", "5MB"), ("rate", "10mbit")]));
    assert!(slower.integrity_ok && slower.duration_s > 2.0 * fast.duration_s, "{} vs {}", slower.duration_s, fast.duration_s);
    assert_eq!(slower.links[0].events, vec!["at 1.000 s: rate 2.000 Mbit/s".to_string()]);
    assert!(slower.links[1].events.is_empty(), "only the up direction changed");
}

#[test]
fn a_scenario_file_runs_three_flows_with_their_own_starts_and_round_trips() {
    let dir = std::env::temp_dir().join(format!("fencepost-sim-topologies-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("three.toml");
    std::fs::write(
        &path,
        r#"
name = "three senders"
bottleneck = "core"
cc = "tahoe"
bytes = "3MB"

[[link]]
name = "core"
between = ["left", "right"]
rate = "20mbit"
delay = "5ms"
queue = "150pkt"

[[link]]
between = ["a", "left"]
delay = "1ms"

[[link]]
between = ["b", "left"]
delay = "20ms"

[[link]]
between = ["c", "left"]
delay = "40ms"

[[link]]
between = ["right", "sink"]

[[flow]]
from = "a"
to = "sink"

[[flow]]
from = "b"
to = "sink"
start = "2s"

[[flow]]
from = "c"
to = "sink"
start = "4s"
cc = "none:window=40"
"#,
    )
    .unwrap();
    let path = path.to_string_lossy().into_owned();
    let report = run(scenario(&[("scenario", &path), ("seed", "5")]));
    assert_eq!(report.topology, "three senders");
    assert_eq!(report.flows.len(), 3);
    assert!(report.integrity_ok, "{:?}", report.flows.iter().map(|f| (&f.status, &f.error)).collect::<Vec<_>>());
    let starts: Vec<f64> = report.flows.iter().map(|f| f.start_s).collect();
    assert_eq!(starts, vec![0.0, 2.0, 4.0]);
    let rtts: Vec<f64> = report.flows.iter().map(|f| f.rtt_mean_ms.unwrap()).collect();
    // Round trips grow with the access links' delays (2, 20, 40 ms each way on top of the core's 5 ms).
    assert!(rtts[0] < rtts[1] && rtts[1] < rtts[2], "{rtts:?}");
    assert!(rtts[0] >= 14.0 && rtts[2] >= 90.0, "{rtts:?}");
    assert_eq!(report.flows[2].cc, "none:window=40,pacing=on");
    assert_eq!(report.flows[0].client_host, "a");
    assert_eq!(report.flows[1].server_host, "sink");
    assert_eq!(report.link_up.offered, report.links[0].counters.offered, "the file's bottleneck is reported at the top");
    assert_eq!(report.to_json(), run(scenario(&[("scenario", &path), ("seed", "5")])).to_json());
}

#[test]
fn flows_may_fail_alone_and_the_run_says_which() {
    // Flow 2 uses the seed profile (100 ms idle timeout) and starts after a 1 s blackout begins: it times out.
    let report = run(scenario(&[
        ("flows", "2"),
        ("profile", "default"),
        ("profile", "seed"),
        ("start", "0s"),
        ("start", "1.2s"),
        ("bytes", "200kB"),
        ("event", "1s:blackout:1s"),
        ("rate", "10mbit"),
    ]));
    assert_eq!(report.flows[0].status, "ok");
    assert_eq!(report.flows[1].status, "timeout");
    assert_eq!(report.status, "timeout");
    assert!(!report.integrity_ok);
    assert!(report.error.as_deref().unwrap().starts_with("flow 2: "), "{:?}", report.error);
}

#[test]
fn with_several_flows_the_summary_counts_every_flow_and_says_whose_the_top_figures_are() {
    // The first flow's 100 kB arrive; the second's 10 MB cannot in the two seconds allowed.
    let report = run(scenario(&[("flows", "2"), ("bytes", "100kB"), ("bytes", "10MB"), ("rate", "10mbit"), ("delay", "10ms"), ("timeout", "2s")]));
    assert!(report.flows[0].integrity_ok && !report.flows[1].integrity_ok, "{:?}", report.flows.iter().map(|f| &f.status).collect::<Vec<_>>());
    assert!(!report.integrity_ok, "the run's verdict covers the second flow");
    let text = report.to_text();
    let result = text.lines().find(|l| l.starts_with("result: ")).unwrap();
    let counted = result.split_once("INCOMPLETE: 1 of 2 flows delivered every byte (").and_then(|(_, rest)| rest.split_once(" of 10,100,000 B)")).map(|(n, _)| n.replace(',', ""));
    let delivered = report.flows[0].bytes_delivered + report.flows[1].bytes_delivered;
    assert_eq!(counted, Some(delivered.to_string()), "{result}");
    assert!(text.contains("\nflow 1 (every flow's own figures are under flows):\n  time to completion "), "{text}");
    assert!(text.contains("\nlink drops "), "{text}");
    // One flow: the summary as it always was.
    let one = run(scenario(&[("bytes", "100kB"), ("rate", "10mbit")])).to_text();
    assert!(!one.contains("flow 1 (") && one.contains("\ntime to completion ") && one.contains("; link drops 0\n"), "{one}");
}
