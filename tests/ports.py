"""A free TCP port on the loopback for the processes a test starts (torchrun's master, Ray's nodes): a fixed
port is taken when another run of the suite shares the machine."""
import socket


def free_port() -> int:
    """A port nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
