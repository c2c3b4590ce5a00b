//! Options of the real-network commands (`serve`, `send`, `echo-bench`) and of
//! the socket API, typed: the same registry and unit parser as the simulator.

use crate::options::{self, default_of, fail, Command, Given, OptionError, Scope};
use crate::transport::transport_config;
use crate::units;
use fencepost_proto::{Duration, TransportConfig};

/// How much `send` sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Amount {
    Bytes(u64),
    Time(Duration),
}

/// Everything a real-network command was told.
#[derive(Clone, Debug)]
pub struct ToolOptions {
    pub transport: TransportConfig,
    /// `send`: exactly one of `--bytes` or `--time`.
    pub amount: Option<Amount>,
    /// `send`: reporting interval.
    pub interval: Duration,
    pub connect_timeout: Duration,
    /// `echo-bench`.
    pub messages: u32,
    pub seed: u64,
    /// `send`/`serve`: hash the stream end to end (false: `--no-verify`, count bytes only).
    pub verify: bool,
    /// `send`: streams at once, the server sending (`-R`), each stream's rate cap in bits per second.
    pub parallel: u32,
    pub reverse: bool,
    pub bitrate: Option<u64>,
    /// `--driver task`: the endpoint's driver runs on the tool's runtime, not a thread of its own.
    pub driver_on_runtime: bool,
}

fn duration(given: &Given, name: &str) -> Result<Duration, OptionError> {
    let micros = units::parse_duration(given.get(name).unwrap_or(default_of(name))).map_err(|e| fail(name, e))?;
    if micros == 0 {
        return Err(fail(name, "must be more than 0"));
    }
    Ok(Duration::from_micros(micros))
}

/// Checks and types the options of `serve`, `send` or `echo-bench`.
pub fn tool_options<'a>(command: Command, pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<ToolOptions, OptionError> {
    let given = Given::parse(command, pairs)?;
    let transport = transport_config(|k| given.get(k))?;
    let amount = if command == Command::Send {
        match (given.get("bytes"), given.get("time")) {
            (Some(bytes), None) => {
                let n = units::parse_bytes(bytes).map_err(|e| fail("bytes", e))?;
                if n == 0 {
                    return Err(fail("bytes", "must be at least 1 byte"));
                }
                Some(Amount::Bytes(n))
            }
            (None, Some(_)) => Some(Amount::Time(duration(&given, "time")?)),
            _ => return Err(fail("bytes", "give exactly one of --bytes (like 100MB) or --time (like 10s)")),
        }
    } else {
        None
    };
    let messages = units::parse_count(given.get("messages").unwrap_or(default_of("messages")), 1)
        .ok()
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| fail("messages", "expected a whole number of messages, from 1 to 4294967295"))?;
    let seed = units::parse_count(given.get("seed").unwrap_or(default_of("seed")), 0).map_err(|e| fail("seed", e))?;
    let no_verify = units::parse_switch(given.get("no-verify").unwrap_or(default_of("no-verify"))).map_err(|e| fail("no-verify", e))?;
    let parallel = units::parse_count(given.get("parallel").unwrap_or(default_of("parallel")), 1)
        .ok()
        .and_then(|n| u32::try_from(n).ok())
        .filter(|&n| n <= 128)
        .ok_or_else(|| fail("parallel", "expected a whole number of streams, from 1 to 128"))?;
    let reverse = units::parse_switch(given.get("reverse").unwrap_or(default_of("reverse"))).map_err(|e| fail("reverse", e))?;
    let bitrate = match given.get("bitrate").filter(|s| !s.is_empty()) {
        Some(text) => Some(units::parse_rate(text).map_err(|e| fail("bitrate", e))?),
        None => None,
    };
    // Given::parse checked the value is one of the choices.
    let driver_on_runtime = given.get("driver").unwrap_or(default_of("driver")) == "task";
    Ok(ToolOptions {
        transport,
        amount,
        interval: duration(&given, "interval")?,
        connect_timeout: duration(&given, "connect-timeout")?,
        messages,
        seed,
        verify: !no_verify,
        parallel,
        reverse,
        bitrate,
        driver_on_runtime,
    })
}

/// A transport from transport options only: what the socket API takes. A server's take
/// what `serve` takes (`key`), a client's what `send` takes (`peer-key`).
pub fn transport_from_options<'a>(server: bool, pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<TransportConfig, OptionError> {
    let pairs: Vec<(&str, &str)> = pairs.into_iter().collect();
    let transport_names: Vec<&str> = options::OPTIONS.iter().filter(|o| o.scope == Scope::Transport).map(|o| o.name).collect();
    for (key, _) in &pairs {
        let key = key.trim().trim_start_matches("--").replace('_', "-");
        if !options::lookup(&key).is_some_and(|(spec, _)| spec.scope == Scope::Transport) {
            return Err(fail(&key, format!("not a transport option; accepted: {}", transport_names.join(", "))));
        }
    }
    let given = Given::parse(if server { Command::Serve } else { Command::Send }, pairs)?;
    transport_config(|k| given.get(k))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_takes_bytes_or_time_in_the_simulator_s_units() {
        let o = tool_options(Command::Send, [("bytes", "10mb"), ("cc", "tahoe")]).unwrap();
        assert_eq!(o.amount, Some(Amount::Bytes(10_000_000)));
        assert_eq!(o.transport.controller.name(), "tahoe");
        let o = tool_options(Command::Send, [("time", "1h")]).unwrap();
        assert_eq!(o.amount, Some(Amount::Time(Duration::from_secs(3600))));
        assert_eq!(o.interval, Duration::from_secs(1));
        let e = tool_options(Command::Send, []).unwrap_err();
        assert_eq!(e.to_string(), "--bytes: give exactly one of --bytes (like 100MB) or --time (like 10s)");
        let e = tool_options(Command::Send, [("bytes", "1MB"), ("time", "2s")]).unwrap_err();
        assert_eq!(e.option, "bytes");
        assert_eq!(tool_options(Command::EchoBench, [("messages", "5")]).unwrap().messages, 5);
        assert!(tool_options(Command::Send, [("time", "0s")]).unwrap_err().message.contains("more than 0"));
    }

    #[test]
    fn the_socket_api_takes_transport_options_only() {
        assert_eq!(transport_from_options(true, [("packet_size", "500")]).unwrap().max_payload, 500);
        let e = transport_from_options(false, [("loss", "1%")]).unwrap_err();
        assert!(e.message.starts_with("not a transport option; accepted: profile, arq, cc"), "{e}");
    }
}
