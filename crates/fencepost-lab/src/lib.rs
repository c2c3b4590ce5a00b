//! fencepost-lab: the parts of the lab that need the kernel's raw interfaces.
//! The lab itself (namespaces, processes, rows) is driven from Python
//! (`fencepost lab`); this crate gives it a real-time link emulator
//! ([`emulator`]), a kernel-TCP peer that samples `TCP_INFO` ([`tcp`]) and
//! interface offload control ([`offload`]). Linux only.

pub mod emulator;
pub mod offload;
pub mod packet_socket;
pub mod tcp;
