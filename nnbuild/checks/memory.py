"""Memory report and gate: flash = text + data, RAM = data + bss (+ the inference stack when known)."""

from nnbuild.errors import NNBuildError


def usage(board, sizes, stack_bytes=None):
    flash = sizes["text"] + sizes["data"]
    ram = sizes["data"] + sizes["bss"] + (stack_bytes or 0)
    return {"flash_bytes": flash, "ram_bytes": ram, "stack_bytes": stack_bytes,
            "flash_capacity": board.get("flash_bytes"), "ram_capacity": board.get("ram_bytes"),
            **{f"{k}_bytes": v for k, v in sizes.items()}}


def gate_memory(board, use):
    """Fail with the needed vs available bytes when the image cannot fit the board."""
    for kind in ("flash", "ram"):
        cap = use[f"{kind}_capacity"]
        if cap and use[f"{kind}_bytes"] > cap:
            raise NNBuildError(f"{kind} {use[f'{kind}_bytes']:,} bytes needed > {cap:,} bytes on {board['name']}")


def bar(used, capacity, width=10):
    """PlatformIO-style `[===       ]  30.1% (used 123 bytes from 456 bytes)`."""
    if not capacity:
        return f"used {used:,} bytes"
    frac = used / capacity
    filled = min(width, int(round(frac * width)))
    return f"[{'=' * filled}{' ' * (width - filled)}] {100 * frac:5.1f}% (used {used:,} bytes from {capacity:,} bytes)"
