//! `cargo run --release -p fencepost-sim --example sim -- loss=30% delay=10ms`:
//! one run from `option=value` arguments, printed as JSON (a Rust-only twin of `fencepost sim --json`).

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let pairs: Vec<(&str, &str)> = args.iter().map(|a| a.split_once('=').unwrap_or((a.as_str(), "true"))).collect();
    match fencepost_sim::Scenario::from_options(pairs) {
        Ok(scenario) => println!("{}", fencepost_sim::run(scenario).to_json()),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    }
}
