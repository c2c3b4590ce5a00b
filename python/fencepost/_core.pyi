"""Type stubs for the native module fencepost._core."""

__version__: str

def simulate(options: list[tuple[str, str]], events: str | None = None) -> str:
    """Runs one scenario; returns the report as JSON; with `events`, writes the
    per-packet event log there (JSON lines). Raises ValueError((option, message))."""

def check_options(options: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Validates options; returns them with defaults. Raises ValueError((option, message))."""

def scenario_options() -> list[tuple[str, str]]:
    """Every scenario option with its default ("" = none)."""

def decode_packet(data: bytes) -> str:
    """The packet type of one datagram; ValueError saying what is wrong otherwise."""

def generate_trace(kind: str, bits_per_second: int, duration_ms: int = 60000, seed: int = 1) -> str:
    """A mahimahi trace as text: kind "constant" or "poisson"."""
