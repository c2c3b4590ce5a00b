"""Type stubs for the native module fencepost._core."""

__version__: str

def simulate(options: list[tuple[str, str]]) -> str:
    """Runs one scenario; returns the report as JSON. Raises ValueError((option, message))."""

def check_options(options: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Validates options; returns them with defaults. Raises ValueError((option, message))."""

def scenario_options() -> list[tuple[str, str]]:
    """Every scenario option with its default ("" = none)."""

def decode_packet(data: bytes) -> str:
    """The packet type of one datagram; ValueError saying what is wrong otherwise."""
