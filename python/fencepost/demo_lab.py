"""`fencepost demo --lab`: the seed experiments on real namespaces, beside the
simulated tables (needs root). Each experiment is a lab sweep into the report's
data folder, so an interrupted demo resumes where it stopped."""

from __future__ import annotations

import math
from typing import Optional

from . import lab, plot
from .demo import ARTICLE, DROP_RATES, Report, Table, _by, _fmt, _pm, _say

LAB_THERMAL_RATE_BPS = 100_000_000
# About one bandwidth-delay product at 100 Mbit/s and a 40 ms round trip: 'no congestion control'.
LAB_THERMAL_WINDOW = 350
LAB_THERMAL = {
    f"fencepost+cc=none:window={LAB_THERMAL_WINDOW},pacing=on": "fencepost, no congestion control",
    "fencepost": "fencepost default (tolerant)",
    "tcp:cubic": "kernel CUBIC",
    "tcp:bbr": "kernel BBR",
    "tcp:reno": "kernel Reno",
}


def _lab_sweep(report: Report, name: str, progress: bool, **kwargs):
    folder = report.out / "data" / name
    result = lab.lab_sweep(out=str(folder), progress=progress, **kwargs)
    seed, trials = kwargs.get("seed", 1), kwargs.get("trials", 5)
    report.experiment_data(name, folder, f"{seed}-{seed + trials - 1} (one per trial)")
    return result


def sliding_fence_lab(report: Report, trials: int, progress: bool, sim: Optional[dict] = None) -> dict:
    """The article's benchmark between namespaces: both impairment methods, both profiles, window vs fence."""
    transports = [f"echo+profile={p}+arq={a}" for p in ("seed", "default") for a in ("window", "fence")]
    out = {}
    for impair in ("iptables", "emulator"):
        fixed = {"delay": "100us"} if impair == "emulator" else {}
        rows, summary = _lab_sweep(report, f"lab-sliding-fence-{impair}", progress, grid={"loss": [f"{p}%" for p in DROP_RATES]},
                                   fixed=fixed, transports=transports, trials=trials, seed=1, impair=impair)
        out[impair] = summary
        for profile in ("seed", "default"):
            columns = ["drop rate", "window packets", "fence packets", "fence saves", "window TTC (s)", "fence TTC (s)", "failed"]
            columns += ["sim window", "sim fence"] if sim and profile in sim else []
            columns += ["article window", "article fence"] if profile == "seed" else []
            how = ("iptables statistic drop at a forwarding router, no added delay (the article's method)" if impair == "iptables"
                   else "fencepost's emulator at the router, 100 us each way")
            table = Table(f"(a, lab) sliding window vs sliding fence on namespaces, {profile} profile, {impair} (n={trials})", columns,
                          note=f"The echo benchmark between network namespaces: {how}; drop in both directions. "
                               "Packets sent by the echo client; failed runs are counted and left out of the means.")
            for p in DROP_RATES:
                w = _by(summary, transport=f"echo+profile={profile}+arq=window", loss=f"{p}%")
                f = _by(summary, transport=f"echo+profile={profile}+arq=fence", loss=f"{p}%")
                saves = 1 - f["packets_sent_mean"] / w["packets_sent_mean"] if w["packets_sent_mean"] else math.nan
                row = [f"{p}%", _pm(w["packets_sent_mean"], w["packets_sent_ci95"]), _pm(f["packets_sent_mean"], f["packets_sent_ci95"]),
                       "–" if math.isnan(saves) else f"{saves:.0%}", _pm(w["duration_s_mean"], w["duration_s_ci95"], 2),
                       _pm(f["duration_s_mean"], f["duration_s_ci95"], 2), f"{w['failed']} / {f['failed']}"]
                if sim and profile in sim:
                    sw = _by(sim[profile], loss=f"{p}%", arq="window")
                    sf = _by(sim[profile], loss=f"{p}%", arq="fence")
                    row += [_fmt(sw["packets_sent_mean"]), _fmt(sf["packets_sent_mean"])]
                if profile == "seed":
                    row += [f"{ARTICLE[p][0]:,}", f"{ARTICLE[p][1]:,}"]
                table.add(*row)
            _say()
            _say(table.text())
            if profile == "seed":
                top = DROP_RATES[-1]
                w = _by(summary, transport="echo+profile=seed+arq=window", loss=f"{top}%")["packets_sent_mean"]
                f = _by(summary, transport="echo+profile=seed+arq=fence", loss=f"{top}%")["packets_sent_mean"]
                report.finding(f"(a, lab) sliding fence on namespaces, {impair}",
                               f"at {top} % drop the fence sent {1 - f / w:.0%} fewer packets than the window (the article: "
                               f"{1 - ARTICLE[top][1] / ARTICLE[top][0]:.0%}).")
            parts = report.section(f"(a, lab) The sliding fence on namespaces, {profile} profile, {impair}")
            parts.append(table.html())
            mine = [dict(r, arq=r["transport"].rsplit("=", 1)[1]) for r in summary if r["transport"].startswith(f"echo+profile={profile}+")]
            reference = {}
            if sim and profile in sim:
                for arq in ("window", "fence"):
                    reference[f"simulated: {arq}"] = {f"{p}%": _by(sim[profile], loss=f"{p}%", arq=arq)["packets_sent_mean"] for p in DROP_RATES}
            if profile == "seed":
                reference["article: window"] = {f"{p}%": ARTICLE[p][0] for p in DROP_RATES}
                reference["article: fence"] = {f"{p}%": ARTICLE[p][1] for p in DROP_RATES}
            fig = plot.metric_vs_condition(mine, "loss", "packets_sent", variant="arq", reference=reference,
                                           title=f"Packets sent on namespaces ({impair}), {profile} profile, n={trials}")
            report.figure(parts, fig, f"lab-packets-vs-drop-{profile}-{impair}",
                          f"Packets sent vs drop rate on namespaces ({impair}), {profile} profile, beside the simulation and the article")
    return out


def thermal_lab(report: Report, trials: int, progress: bool) -> dict:
    link = {"rate": "100mbit", "delay": "10ms", "jitter": "10ms", "loss": "10%", "queue": "500kB"}
    rows, summary = _lab_sweep(report, "lab-thermal", progress, grid={}, fixed={**link, "time": "20s"}, transports=list(LAB_THERMAL),
                               trials=trials, seed=1, impair="emulator")
    table = Table(f"(b, lab) THERMAL on namespaces: 100 Mbit/s, 10 % loss, 10 ± 10 ms, 20 s (n={trials})",
                  ["sender", "utilisation", "goodput (Mbit/s)", "retransmissions", "mean RTT (ms)", "failed"],
                  note="fencepost's emulator at the router: 100 Mbit/s each way, 10 % random loss each way, one-way delay 10 ± 10 ms "
                       "(uniform, may reorder), 500 kB queue. Goodput measured at the receiver over the sender's 20 s. Kernel TCP "
                       f"through our own bulk peer (TCP_CONGESTION). 'No congestion control' is a fixed {LAB_THERMAL_WINDOW}-packet window, paced.")
    for transport, label in LAB_THERMAL.items():
        r = _by(summary, transport=transport)
        table.add(label, f"{r['goodput_bps_mean'] / LAB_THERMAL_RATE_BPS:.1%}", _pm(r["goodput_bps_mean"] / 1e6, r["goodput_bps_ci95"] / 1e6, 2),
                  _fmt(r["retransmissions_mean"]), _fmt(r["rtt_mean_ms_mean"], 1), str(r["failed"]))
    _say()
    _say(table.text())
    share = {t: _by(summary, transport=t)["goodput_bps_mean"] / LAB_THERMAL_RATE_BPS for t in LAB_THERMAL}
    report.finding("(b, lab) THERMAL on namespaces", f"on 100 Mbit/s with 10 % loss, fencepost's default used {share['fencepost']:.0%} of the link "
                   f"and kernel CUBIC {share['tcp:cubic']:.1%}, BBR {share['tcp:bbr']:.1%}.")
    parts = report.section("(b, lab) THERMAL on namespaces")
    parts.append(table.html())
    return {"summary": summary, "rows": rows}


def duplication_lab(report: Report, trials: int, progress: bool) -> dict:
    """The duplication paper's experiment as it ran it: kernel TCP (CUBIC, Linux's default)
    through an emulator that loses and duplicates packets, 1 Gbit/s, 0.1 and 2 ms."""
    from .demo_redundancy import DUP_DELAYS, DUP_LOSSES, DUP_SHARES, PAPER, PATH_BPS, fill_duplication_table

    rows, summary = _lab_sweep(report, "lab-duplication", progress,
                               grid={"delay": list(DUP_DELAYS), "loss": DUP_LOSSES, "dup-up": DUP_SHARES},
                               fixed={"rate": "1gbit", "queue": "1MB", "time": "3s"}, transports=["tcp:cubic"],
                               trials=trials, seed=1, impair="emulator")
    parts = report.section("(h1, lab) Packet duplication: the duplication paper's curves for kernel TCP on namespaces")
    for delay, label in DUP_DELAYS.items():
        table = Table(f"(h1, lab) kernel CUBIC goodput (% of 1 Gbit/s) vs loss, share duplicated, {label} one way (n={trials})",
                      ["loss", *[f"dup {s}" for s in DUP_SHARES]],
                      note="Kernel TCP (CUBIC) through fencepost's emulator at 1 Gbit/s with a 1 MB queue: random loss each way, "
                           "the share of packets toward the receiver duplicated on entry, each copy lost or not on its own "
                           "(as netem does), 3 s of data; goodput at the receiver. " + PAPER[delay])
        fill_duplication_table(table, lambda loss, share: _by(summary, delay=delay, loss=loss, **{"dup-up": share}))
        _say()
        _say(table.text())
        parts.append(table.html())
        worst = DUP_LOSSES[-1]
        plain = _by(summary, delay=delay, loss=worst, **{"dup-up": "0%"})["goodput_bps_mean"]
        doubled = _by(summary, delay=delay, loss=worst, **{"dup-up": "100%"})["goodput_bps_mean"]
        report.finding(f"(h1, lab) kernel TCP with duplication, {label}", f"at {worst} loss kernel CUBIC kept {plain / PATH_BPS:.1%} of 1 Gbit/s, "
                       f"and {doubled / PATH_BPS:.1%} with every packet duplicated.")
        mine = [dict(r, share=r["dup-up"]) for r in summary if str(r["delay"]) == delay]
        fig = plot.metric_vs_condition(mine, "loss", "goodput_bps", variant="share",
                                       title=f"Kernel CUBIC on namespaces: goodput vs loss with duplication, {label} one way (n={trials})")
        report.figure(parts, fig, f"lab-duplication-{delay}",
                      f"Kernel TCP's goodput against random loss for each share of packets duplicated, {label} one way, on namespaces")
    return {"summary": summary, "rows": rows}


def run_lab(report: Report, trials: int, progress: bool, sim: Optional[dict] = None) -> dict:
    lab.require_root()
    return {"thermal": thermal_lab(report, trials, progress), "sliding_fence": sliding_fence_lab(report, trials, progress, sim),
            "duplication": duplication_lab(report, trials, progress)}
