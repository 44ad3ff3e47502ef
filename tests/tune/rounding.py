"""What a ratio of two printed, rounded numbers can be: for checking a printed speed-up against the printed
times it was computed from (before rounding)."""


def ratio_bounds(numerator: float, denominator: float, decimals: int = 2) -> tuple[float, float]:
    """The lowest and highest value of a / b for the a and b that print as ``numerator`` and ``denominator``."""
    half = 0.5 * 10 ** -decimals
    return (numerator - half) / (denominator + half), (numerator + half) / max(denominator - half, 1e-12)
