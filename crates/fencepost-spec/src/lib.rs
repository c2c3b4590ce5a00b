//! fencepost-spec: one specification of a run, below the simulator, the real
//! runtime and the Python bindings. It owns the registry of options (name,
//! scope, kind, default, help), the one parser of units, the typed
//! descriptions of transports, links, workloads and topologies built from
//! options or scenario files, and the schema of the reports runs produce.

pub mod link;
pub mod options;
pub mod report;
pub mod scenario;
pub mod tools;
pub mod transport;
pub mod units;

pub use link::{Direction, Directions, LinkAction};
pub use options::{Command, Given, Kind, OptionError, OptionSpec, Scope, OPTIONS};
pub use report::{FlowReport, LinkReport, RunReport};
pub use scenario::{topology_from_text, FlowSpec, Hop, LinkEventSpec, LinkSpec, Scenario, Topology, Workload};
pub use transport::{describe_cc, parse_cc, register_controller, transport_config};
