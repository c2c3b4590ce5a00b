//! The registry of options: every option any command or the Python API takes,
//! once, with its scope, kind, default and help. The Python CLI builds its
//! argument parsers from this table (`_core.option_specs()`), and every value
//! given to any command is checked here, by the one unit parser.

use crate::units::{self, UnitError};
use serde::Serialize;
use std::fmt;

/// What part of a run an option shapes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// The transport of a flow (profile, recovery, congestion control).
    Transport,
    /// A link of the topology (the bottleneck of a built-in one).
    Link,
    /// What a flow's applications do.
    Workload,
    /// The run as a whole (topology, seed, bounds, reporting).
    Run,
}

/// How a value is written; the Python API reads a bare number in the kind's unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Bytes: `64kB`, `10MB`, `1000000`.
    Size,
    /// `10ms`, `1.5s`, `2min`, `1h`, `0`; a bare number is seconds.
    Duration,
    /// `10%` or `0.1`.
    Probability,
    /// Bits per second: `100mbit`, `12mbps`; a bare number is bit/s.
    Rate,
    /// A whole number.
    Count,
    /// `on`/`off`, `true`/`false`.
    Switch,
    /// One of `choices`.
    Choice,
    /// A queue limit: `64kB`, `100pkt`, `unlimited`.
    Queue,
    /// A file.
    Path,
    /// A structured value with its own grammar (described in the help).
    Spec,
}

/// The commands that take options.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Command {
    #[serde(rename = "sim")]
    Sim,
    #[serde(rename = "sweep")]
    Sweep,
    #[serde(rename = "send")]
    Send,
    #[serde(rename = "serve")]
    Serve,
    #[serde(rename = "echo-bench")]
    EchoBench,
}

impl Command {
    pub fn name(self) -> &'static str {
        match self {
            Command::Sim => "sim",
            Command::Sweep => "sweep",
            Command::Send => "send",
            Command::Serve => "serve",
            Command::EchoBench => "echo-bench",
        }
    }

    pub fn parse(name: &str) -> Option<Command> {
        [Command::Sim, Command::Sweep, Command::Send, Command::Serve, Command::EchoBench].into_iter().find(|c| c.name() == name)
    }
}

#[derive(Clone, Copy, Debug, Serialize)]
pub struct OptionSpec {
    pub name: &'static str,
    pub scope: Scope,
    pub kind: Kind,
    /// How the value is shown in help (`SIZE`, `DURATION`).
    pub metavar: &'static str,
    /// The default as the user would write it; empty when the default comes from elsewhere (the profile).
    pub default: &'static str,
    pub help: &'static str,
    /// For [`Kind::Choice`].
    pub choices: &'static [&'static str],
    pub commands: &'static [Command],
    /// May be given once per flow (in order) instead of once for all flows.
    pub per_flow: bool,
    /// Also exists as `NAME-up` (client to server) and `NAME-down`, overriding `NAME` for one direction.
    pub per_direction: bool,
    /// May be given any number of times (each is one more, like link events).
    pub repeatable: bool,
    /// Older names still accepted.
    pub aliases: &'static [&'static str],
}

use Command::{EchoBench, Send, Serve, Sim, Sweep};

const ALL: &[Command] = &[Sim, Sweep, Send, Serve, EchoBench];
const SIMULATED: &[Command] = &[Sim, Sweep];

const fn option(name: &'static str, scope: Scope, kind: Kind, metavar: &'static str, default: &'static str, help: &'static str, commands: &'static [Command]) -> OptionSpec {
    OptionSpec { name, scope, kind, metavar, default, help, choices: &[], commands, per_flow: false, per_direction: false, repeatable: false, aliases: &[] }
}

const fn per_flow(mut spec: OptionSpec) -> OptionSpec {
    spec.per_flow = true;
    spec
}

const fn per_direction(mut spec: OptionSpec) -> OptionSpec {
    spec.per_direction = true;
    spec
}

/// The accepted controller names and parameters, shown in help and errors.
pub const CC_FORMS: &str = "none[:window=N,rate=R,pacing=on|off], tahoe[:iw=N,ssthresh=N,pacing=on|off], reno[:iw=N,ssthresh=N,pacing=on|off], cubic[:iw=N,pacing=on|off,hystart=on|off], bbr[:iw=N] or tolerant[:iw=N]";

/// Every option, in the order help lists them.
pub static OPTIONS: &[OptionSpec] = &[
    // ---- workload ----
    per_flow(OptionSpec {
        choices: &["bulk", "echo", "stream"],
        ..option("workload", Scope::Workload, Kind::Choice, "bulk|echo|stream", "bulk",
            "bulk: send --bytes (or for --time) and close; echo: the seed article's messages of 200-400 B, 2-20 ms apart, echoed back; \
             stream: messages of --message-size at --message-rate for --time (default 10s), each message's latency measured",
            SIMULATED)
    }),
    per_flow(option("bytes", Scope::Workload, Kind::Size, "SIZE", "1MB", "bytes to send, e.g. 1000000, 64kB, 100MB, 1GB", &[Sim, Sweep, Send])),
    per_flow(OptionSpec {
        aliases: &["duration"],
        ..option("time", Scope::Workload, Kind::Duration, "DURATION", "", "send for this long instead of a number of bytes, e.g. 10s", &[Sim, Sweep, Send])
    }),
    per_flow(option("message-size", Scope::Workload, Kind::Size, "SIZE", "1kB", "stream: bytes per message", SIMULATED)),
    per_flow(option("message-rate", Scope::Workload, Kind::Rate, "RATE", "2mbit", "stream: the rate messages are sent at (message size over their spacing)", SIMULATED)),
    per_flow(option("messages", Scope::Workload, Kind::Count, "N", "1000", "messages in the echo workload", &[Sim, Sweep, EchoBench])),
    per_flow(option("start", Scope::Workload, Kind::Duration, "DURATION", "0", "when the flow starts; with several flows, once for all or once per flow", SIMULATED)),
    // ---- link ----
    per_direction(option("delay", Scope::Link, Kind::Duration, "DURATION", "10ms", "one-way propagation delay, e.g. 10ms", SIMULATED)),
    per_direction(option("jitter", Scope::Link, Kind::Duration, "DURATION", "0", "each packet's delay varies by up to this much (uniform), or with this standard deviation (normal)", SIMULATED)),
    per_direction(OptionSpec {
        choices: &["uniform", "normal"],
        ..option("jitter-dist", Scope::Link, Kind::Choice, "uniform|normal", "uniform", "how the delay varies: uniform in +-jitter, or normal with standard deviation jitter", SIMULATED)
    }),
    per_direction(option("jitter-corr", Scope::Link, Kind::Probability, "P", "0%", "correlation of a packet's delay variation with the last one's (as netem's), e.g. 25%", SIMULATED)),
    option("keep-order", Scope::Link, Kind::Switch, "BOOL", "false", "jitter never reorders packets: true or false", SIMULATED),
    per_direction(option("loss", Scope::Link, Kind::Probability, "P", "0%", "random loss, 10% or 0.1", SIMULATED)),
    per_direction(option("loss-model", Scope::Link, Kind::Spec, "MODEL", "bernoulli", "bernoulli, or gilbert:p=P,r=R[,good=G,bad=B] for bursty loss", SIMULATED)),
    per_direction(option("rate", Scope::Link, Kind::Rate, "RATE", "", "bottleneck rate, e.g. 100mbit (default unlimited)", SIMULATED)),
    per_direction(option("trace", Scope::Link, Kind::Path, "FILE", "", "mahimahi bandwidth trace (instead of --rate)", SIMULATED)),
    per_direction(option("queue", Scope::Link, Kind::Queue, "LIMIT", "unlimited", "droptail queue before the bottleneck: 64kB, 100pkt or unlimited", SIMULATED)),
    per_direction(option("dup", Scope::Link, Kind::Probability, "P", "0%", "probability a packet is duplicated on entry (the copy then meets loss on its own, as in netem)", SIMULATED)),
    per_direction(option("corrupt", Scope::Link, Kind::Probability, "P", "0%", "probability a packet has one bit flipped (the receiving host's checksums discard it)", SIMULATED)),
    per_direction(OptionSpec {
        choices: &["before", "after"],
        ..option("loss-position", Scope::Link, Kind::Choice, "before|after", "before",
            "random loss before the queue (as iptables at a router; a lost packet takes no capacity) or after the bottleneck (it does)", SIMULATED)
    }),
    OptionSpec {
        repeatable: true,
        ..option("event", Scope::Link, Kind::Spec, "AT:ACTION[:VALUE][:DIR]", "",
            "a link event, repeatable: at AT, blackout:DURATION (drop everything), rate:RATE, loss:P or delay:DURATION, \
             on up, down or both (default) directions of the bottleneck, e.g. 20s:blackout:10s",
            SIMULATED)
    },
    // ---- transport ----
    per_flow(OptionSpec {
        choices: &["seed", "default"],
        ..option("profile", Scope::Transport, Kind::Choice, "seed|default", "default", "transport profile: seed (the seed article's protocol) or default (the modern design)", ALL)
    }),
    per_flow(OptionSpec {
        choices: &["fence", "window"],
        ..option("arq", Scope::Transport, Kind::Choice, "fence|window", "fence", "loss recovery: fence (resend only holes) or window (cumulative acks only)", ALL)
    }),
    per_flow(option("cc", Scope::Transport, Kind::Spec, "CC", "", "congestion control: none[:window=N,rate=R,pacing=on|off] (a fixed window), tahoe[:iw=N,ssthresh=N,pacing=on|off], reno[...] (NewReno), cubic[:iw=N,pacing=on|off,hystart=on|off], bbr[:iw=N] (BBR v1), tolerant[:iw=N] (fencepost's loss-tolerant controller) or python:FILE:CLASS (a fencepost.Controller subclass) (default: the profile's; tolerant in the default profile)", ALL)),
    per_flow(option("packet-size", Scope::Transport, Kind::Size, "BYTES", "", "data payload per packet (default: the profile's; 256 in seed; in default what fills a 1500-byte IP packet with room for FEC repairs: 1436, 1456 with --insecure, 2 more with --redundancy none or dup)", ALL)),
    per_flow(option("idle-timeout", Scope::Transport, Kind::Duration, "DURATION", "", "end a connection after this long without hearing from the peer (default: the profile's; 100ms in seed, 30s in default)", ALL)),
    per_flow(option("redundancy", Scope::Transport, Kind::Spec, "none|dup:R|fec:...", "",
        "redundancy (default: the profile's; none in seed, fec:adaptive:transfers=off in default): none; dup:R sends a share R of data packets twice; \
         fec:rs:K/N sends N-K Reed-Solomon repairs after every K packets; fec:window:W/R one repair over the last W packets after every R; \
         fec:adaptive[:budget=B,transfers=off] repairs as the measured loss needs, at most B (default 50%), with transfers=off only for flows the application limits", ALL)),
    per_flow(option("accept-repairs", Scope::Transport, Kind::Switch, "BOOL", "true",
        "take the peer's FEC repair packets; false says so in the handshake, and the peer's FEC then sends none", ALL)),
    per_flow(option("insecure", Scope::Transport, Kind::Switch, "BOOL", "false",
        "plaintext packets (wire format version 1): no encryption, no authentication; the seed profile is always plaintext, as the seed article's packets were", ALL)),
    per_flow(OptionSpec {
        choices: &["aes-256-gcm", "chacha20-poly1305"],
        ..option("cipher", Scope::Transport, Kind::Choice, "aes-256-gcm|chacha20-poly1305", "aes-256-gcm", "the AEAD that protects packets after the handshake (the client chooses)", ALL)
    }),
    per_flow(option("real-cipher", Scope::Transport, Kind::Switch, "BOOL", "false",
        "run the AEAD on every simulated packet; by default the simulator keeps its packet numbers, tags and sizes but skips the cipher's work \
         (virtual time never counted it: the run's results are the same, in about two thirds of the wall-clock time)", SIMULATED)),
    option("key", Scope::Transport, Kind::Path, "FILE", "",
        "the server's private key, a file written by `fencepost keygen` (default: a new key at each start, its public half printed)", &[Serve]),
    option("peer-key", Scope::Transport, Kind::Spec, "KEY", "",
        "the server's public key (base64, as `fencepost keygen` and `serve` print it): connect only to the server holding it (default: trust the key the server shows)", &[Send, EchoBench]),
    option("retry", Scope::Transport, Kind::Switch, "BOOL", "true",
        "validate a client's address with a retry token before keeping any state for it (one more round trip per handshake)", &[Serve]),
    // ---- run ----
    option("topology", Scope::Run, Kind::Spec, "line|dumbbell:N", "line", "line: one flow over one path; dumbbell:N: N flows through one shared bottleneck (the link options describe it)", SIMULATED),
    option("flows", Scope::Run, Kind::Count, "N", "", "short for --topology dumbbell:N", SIMULATED),
    option("scenario", Scope::Run, Kind::Path, "FILE", "", "a scenario file (TOML): hosts, links, flows and events of any topology", SIMULATED),
    option("seed", Scope::Run, Kind::Count, "N", "1", "seed for every random choice of the run", &[Sim, EchoBench]),
    option("timeout", Scope::Run, Kind::Duration, "DURATION", "3600s", "bound on the run's virtual time (given none, at least twice the latest end of a timed flow)", SIMULATED),
    option("series", Scope::Run, Kind::Duration, "DURATION", "0s", "record each flow's goodput every DURATION of virtual time (0s: off)", SIMULATED),
    option("interval", Scope::Run, Kind::Duration, "DURATION", "1s", "report every", &[Send]),
    option("parallel", Scope::Run, Kind::Count, "N", "1", "streams (connections) at once, each reported on its own and summed; a --bytes total is split among them", &[Send]),
    option("reverse", Scope::Run, Kind::Switch, "BOOL", "false", "the server sends and this side receives (iperf3's -R)", &[Send]),
    option("bitrate", Scope::Run, Kind::Rate, "RATE", "", "write each stream at most this fast, e.g. 50mbit (iperf3's -b; default: as fast as the transport goes)", &[Send]),
    option("no-verify", Scope::Run, Kind::Switch, "BOOL", "false",
        "skip the end-to-end SHA-256 of the stream and check only the byte count (for benchmarks: hashing costs about as much CPU as the transport)", &[Send, Serve]),
    option("connect-timeout", Scope::Run, Kind::Duration, "DURATION", "10s", "give up on the handshake after", &[Send, EchoBench]),
    OptionSpec {
        choices: &["thread", "task"],
        ..option("driver", Scope::Run, Kind::Choice, "thread|task", "thread",
            "where the endpoint's socket, timers and acks run: thread (one of their own) or task (on the runtime the tool's work runs on: one thread \
             wake-up per received packet instead of two, so lower latency and a little less CPU; a long piece of work there delays acks)",
            &[Send, Serve, EchoBench])
    },
];

/// An option with a value that is not acceptable, or an option that does not exist.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OptionError {
    pub option: String,
    pub message: String,
}

impl fmt::Display for OptionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "--{}: {}", self.option, self.message)
    }
}

impl std::error::Error for OptionError {}

pub fn fail(option: &str, e: impl fmt::Display) -> OptionError {
    OptionError { option: option.to_string(), message: e.to_string() }
}

/// The options of one command, in registry order.
pub fn for_command(command: Command) -> impl Iterator<Item = &'static OptionSpec> {
    OPTIONS.iter().filter(move |o| o.commands.contains(&command))
}

/// Finds an option by any of its names: `NAME`, an alias, or `NAME-up`/`NAME-down`
/// for a per-direction one. Returns the spec and the canonical name given.
pub fn lookup(name: &str) -> Option<(&'static OptionSpec, String)> {
    if let Some(spec) = OPTIONS.iter().find(|o| o.name == name) {
        return Some((spec, name.to_string()));
    }
    if let Some(spec) = OPTIONS.iter().find(|o| o.aliases.contains(&name)) {
        return Some((spec, spec.name.to_string()));
    }
    for suffix in ["-up", "-down"] {
        if let Some(base) = name.strip_suffix(suffix) {
            if let Some(spec) = OPTIONS.iter().find(|o| o.name == base && o.per_direction) {
                return Some((spec, name.to_string()));
            }
        }
    }
    None
}

/// Every name an option is accepted under (for error messages).
fn accepted_names(command: Command) -> Vec<String> {
    let mut names = Vec::new();
    for o in for_command(command) {
        names.push(o.name.to_string());
        if o.per_direction {
            names.push(format!("{}-up", o.name));
            names.push(format!("{}-down", o.name));
        }
    }
    names
}

/// Checks one value against its option's kind (structured kinds are checked where they are built).
pub fn check_value(spec: &OptionSpec, value: &str) -> Result<(), UnitError> {
    match spec.kind {
        Kind::Size => units::parse_bytes(value).map(drop),
        Kind::Duration => units::parse_duration(value).map(drop),
        Kind::Probability => units::parse_probability(value).map(drop),
        Kind::Rate => units::parse_rate(value).map(drop),
        Kind::Count => units::parse_count(value, 0).map(drop),
        Kind::Switch => units::parse_switch(value).map(drop),
        Kind::Queue => units::parse_queue(value).map(drop),
        Kind::Choice if !spec.choices.contains(&value) => {
            Err(UnitError(format!("{value:?} is not accepted; accepted: {}", spec.choices.join(", "))))
        }
        Kind::Path if value.is_empty() => Err(UnitError("expected a file name".into())),
        Kind::Choice | Kind::Path | Kind::Spec => Ok(()),
    }
}

/// Options given to one command, checked: every name known to that command, every
/// value of the right form, repeated only where that is allowed. Names are
/// canonical (`packet_size` and `--packet-size` are `packet-size`; aliases resolved).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Given {
    pairs: Vec<(String, String)>,
}

impl Given {
    pub fn parse<'a>(command: Command, pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Given, OptionError> {
        let mut out: Vec<(String, String)> = Vec::new();
        for (key, value) in pairs {
            let key = key.trim().trim_start_matches("--").replace('_', "-");
            let value = value.trim();
            let Some((spec, name)) = lookup(&key) else {
                return Err(fail(&key, format!("unknown option; accepted: {}", accepted_names(command).join(", "))));
            };
            if !spec.commands.contains(&command) {
                return Err(fail(
                    &key,
                    format!("not an option of `fencepost {}`; accepted: {}", command.name(), accepted_names(command).join(", ")),
                ));
            }
            check_value(spec, value).map_err(|e| fail(&name, e))?;
            let repeated = out.iter().any(|(k, _)| *k == name);
            if repeated && !(spec.repeatable || (spec.per_flow && matches!(command, Sim | Sweep))) {
                return Err(fail(&name, "given more than once; it takes one value"));
            }
            out.push((name, value.to_string()));
        }
        Ok(Given { pairs: out })
    }

    /// Pairs as given, canonical names, in order.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }

    pub fn contains(&self, name: &str) -> bool {
        self.pairs.iter().any(|(k, _)| k == name)
    }

    /// Every value given for `name`, in order.
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.pairs.iter().filter(|(k, _)| k == name).map(|(_, v)| v.as_str()).collect()
    }

    /// The value given for `name` (the first, for a repeated one).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// The value for flow `flow` of `flows`: given once (all flows), or once per flow.
    pub fn for_flow(&self, name: &str, flow: usize, flows: usize) -> Result<Option<&str>, OptionError> {
        let values = self.all(name);
        match values.len() {
            0 => Ok(None),
            1 => Ok(Some(values[0])),
            n if n == flows => Ok(Some(values[flow])),
            n => Err(fail(name, format!("given {n} times for {flows} flow(s); give it once for every flow, or once per flow"))),
        }
    }

    pub fn push(&mut self, name: &str, value: &str) {
        self.pairs.push((name.to_string(), value.to_string()));
    }

    pub fn remove(&mut self, name: &str) {
        self.pairs.retain(|(k, _)| k != name);
    }
}

/// The registry's default of `name` (empty for none).
pub fn default_of(name: &str) -> &'static str {
    lookup(name).map_or("", |(spec, _)| spec.default)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_speaks_the_same_units() {
        for (value, ok) in [("10mb", true), ("1.5GB", true), ("64KiB", true), ("1h", false), ("lots", false), ("-3", false)] {
            let sim = Given::parse(Command::Sim, [("bytes", value)]);
            let send = Given::parse(Command::Send, [("bytes", value)]);
            assert_eq!(sim.is_ok(), ok, "{value}");
            assert_eq!(sim.map_err(|e| e.to_string()), send.map_err(|e| e.to_string()));
        }
        for value in ["1h", "90min", "0.5s", "10", "soon"] {
            let sim = Given::parse(Command::Sim, [("timeout", value)]).map(drop).map_err(|e| e.message);
            let send = Given::parse(Command::Send, [("time", value)]).map(drop).map_err(|e| e.message);
            assert_eq!(sim, send, "{value}");
        }
    }

    #[test]
    fn names_are_canonical_and_checked_per_command() {
        let g = Given::parse(Command::Sim, [("--packet_size", "500"), ("duration", "5s"), ("loss-up", "3%")]).unwrap();
        assert_eq!(g.pairs()[0].0, "packet-size");
        assert_eq!(g.pairs()[1].0, "time", "the old name is an alias");
        assert_eq!(g.get("loss-up"), Some("3%"));
        let e = Given::parse(Command::Send, [("loss", "10%")]).unwrap_err();
        assert!(e.to_string().starts_with("--loss: not an option of `fencepost send`; accepted: bytes, time"), "{e}");
        let e = Given::parse(Command::Sim, [("colour", "red")]).unwrap_err();
        assert!(e.message.contains("unknown option") && e.message.contains("loss-model"), "{e}");
        let e = Given::parse(Command::Sim, [("seed", "1"), ("seed", "2")]).unwrap_err();
        assert!(e.message.contains("more than once"), "{e}");
        let e = Given::parse(Command::Send, [("cc", "tahoe"), ("cc", "none")]).unwrap_err();
        assert!(e.message.contains("more than once"), "one connection, one controller: {e}");
        let g = Given::parse(Command::Sim, [("cc", "tahoe"), ("cc", "none")]).unwrap();
        assert_eq!(g.for_flow("cc", 1, 2).unwrap(), Some("none"));
        assert!(g.for_flow("cc", 0, 3).is_err());
        let e = Given::parse(Command::Sim, [("arq", "sack")]).unwrap_err();
        assert_eq!(e.to_string(), "--arq: \"sack\" is not accepted; accepted: fence, window");
    }

    #[test]
    fn registry_is_consistent() {
        for o in OPTIONS {
            assert!(!o.help.is_empty() && !o.metavar.is_empty() && !o.commands.is_empty(), "{}", o.name);
            assert_eq!(o.kind == Kind::Choice, !o.choices.is_empty(), "{}", o.name);
            if !o.default.is_empty() && o.kind != Kind::Spec {
                check_value(o, o.default).unwrap_or_else(|e| panic!("{}: default {:?}: {e}", o.name, o.default));
            }
            assert_eq!(OPTIONS.iter().filter(|p| p.name == o.name).count(), 1, "{} twice", o.name);
        }
    }
}
