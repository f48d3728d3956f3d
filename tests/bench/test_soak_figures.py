"""The soak's figures and bounds (`proxy.bench.soak`), from samples given here: the memory verdict
reads the RSS at a fifth of the run against the end; clients, minutes and file descriptors are
bounded."""

from __future__ import annotations

from proxy.bench.soak import Tally, figures, refusal, sample_interval

MIB = 2**20


def _samples(rss_a: list[float], rss_b: list[float], keys: list[int]) -> list[dict]:
    return [
        {
            "t_s": 30.0 * i,
            "rss_bytes": [a * MIB, b * MIB],
            "cpu_s": [3.0 * i, 1.5 * i],
            "redis_keys": k,
            "lifecycles": 0,
            "errors": 0,
        }
        for i, (a, b, k) in enumerate(zip(rss_a, rss_b, keys, strict=True))
    ]


def test_memory_is_flat_when_growth_after_the_first_fifth_stays_under_the_threshold():
    # 5 minutes sampled every 30 s: the first fifth ends at 60 s (the third sample).
    a = [50, 70, 80, 81, 82, 83, 84, 85, 86, 87, 99]  # +19 MiB from 60 s: flat (≤ 20 MiB)
    b = [50, 70, 80, 85, 90, 95, 100, 105, 110, 115, 120]  # +40 MiB: not flat (> 20 MiB and > 10 %)
    keys = [2, 100, 300, 310, 305, 300, 320, 310, 300, 330, 320]
    tally = Tally()
    tally.lifecycles = {"v1": 6, "v2": 4}
    out = figures(tally, _samples(a, b, keys), clients={"v1": 2, "v2": 2}, duration_s=300.0, elapsed_s=300.0)
    ra, rb = out["replicas"]
    assert (ra["settled_at_s"], ra["rss_settled"], ra["rss_end"], ra["growth"], ra["flat"]) == (
        60.0,
        80 * MIB,
        99 * MIB,
        19 * MIB,
        True,
    )
    assert (ra["window_min"], ra["window_max"], ra["window_spread"]) == (80 * MIB, 99 * MIB, 19 * MIB)
    assert (rb["growth"], rb["threshold"], rb["flat"]) == (40 * MIB, 20 * MIB, False)
    assert out["memory_flat"] is False
    assert out["redis_keys"] == {"min": 2, "max": 330, "end": 320, "samples": keys}
    assert (out["lifecycles"], out["rate_per_s"]) == ({"v1": 6, "v2": 4, "total": 10}, 10 / 300)
    assert out["replica_cores"] == [0.1, 0.05]


def test_the_threshold_is_a_tenth_of_a_large_rss():
    a = [300, 400, 400, 420, 439]  # +39 MiB of 400: under 10 % (40 MiB)
    out = figures(Tally(), _samples(a, a, [1] * 5), clients={"v1": 1, "v2": 1}, duration_s=120.0, elapsed_s=120.0)
    assert (out["replicas"][0]["threshold"], out["replicas"][0]["flat"]) == (40 * MIB, True)


def test_samples_every_30_s_or_a_tenth_of_a_shorter_run():
    assert (sample_interval(300.0), sample_interval(30.0), sample_interval(3600.0)) == (30.0, 3.0, 30.0)


def test_clients_minutes_and_file_descriptors_are_bounded():
    assert refusal(500, 5.0, 20_000) is None
    assert refusal(1, 5.0, 20_000) == "--soak-clients takes 2 to 5000"
    assert refusal(5001, 5.0, 1 << 30) == "--soak-clients takes 2 to 5000"
    assert refusal(20, 0.0, 20_000) == "--soak-minutes takes more than 0 and at most 60"
    assert refusal(500, 5.0, 20_000, 3) == "--soak-replicas takes 1 or 2"
    kill = "--soak-kill-at needs two replicas and a time within the run (seconds, more than 0)"
    assert (refusal(500, 5.0, 20_000, 1, 60.0), refusal(500, 5.0, 20_000, 2, 300.0), refusal(500, 5.0, 20_000, 2, 0.0)) == (
        kill,
    ) * 3
    assert refusal(500, 5.0, 20_000, 2, 150.0) is None
    assert refusal(500, 5.0, 1024) == (
        "500 clients need about 2256 file descriptors; RLIMIT_NOFILE allows 1024 (raise the hard limit, e.g. ulimit -Hn)"
    )


def test_each_failed_lifecycle_has_one_kind_and_a_refusal_waits_its_retry_after():
    import aiohttp

    from proxy.bench.asking import WrongAnswer
    from proxy.bench.clients import BenchError, GatewayFailed, Refused
    from proxy.bench.soak import kind_of

    reset = aiohttp.ClientOSError(104, "Connection reset by peer")
    cases = [
        Refused(1.0, "503"),
        WrongAnswer("x"),
        GatewayFailed("502"),
        aiohttp.ServerDisconnectedError(),
        reset,
        ConnectionResetError(),
        TimeoutError(),
        BenchError("HTTP 500"),
        aiohttp.ClientConnectorError(None, OSError(111, "refused")),
    ]
    assert [kind_of(e) for e in cases] == ["refused", "wrong", "reset", "reset", "reset", "reset", "timeout", "error", "error"]
    tally = Tally()
    tally.killed_at = 100.0
    waits = [tally.failed("v2", Refused(1.0, "503"), 99.0), tally.failed("v1", GatewayFailed("502"), 101.0)]
    assert waits == [1.0, 0.1]
    assert tally.failures["refused"] == {"v1": 0, "v2": 1} and tally.failures["reset"] == {"v1": 1, "v2": 0}
    assert tally.after_kill == {"refused": 0, "reset": 1, "timeout": 0, "wrong": 0, "error": 0}
    assert len(tally.refusal_s) == 1


def test_nginx_timings_are_read_per_request_with_a_retried_request_counted_by_its_last_try():
    from proxy.bench.soak import nginx_timings

    log = "\n".join(
        [
            "0.012|0.000|0.011",
            "0.500|0.001|0.499",
            "2.250|0.004, 0.002|-, 2.240",  # tried on a replica that refused, then answered by the other
            "0.001|-|-",  # answered by nginx itself
            "not a timing line",
        ]
    )
    assert nginx_timings(log) == {
        "count": 4,
        "request": {"p50": 12.0, "p99": 2250.0, "max": 2250.0},
        "connect": {"p50": 1.0, "p99": 2.0, "max": 2.0},
        "replica": {"p50": 499.0, "p99": 2240.0, "max": 2240.0},
    }
    assert nginx_timings("") == {"count": 0, "request": None, "connect": None, "replica": None}
