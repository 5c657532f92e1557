"""One rank of the real SGLang runtime, run inside a release's environment.

Never imported by the workbench; started by ``release_process`` (target ``runtime.release_rank``) on the
release environment's own Python, the release's sources first on ``sys.path``. It imports its
siblings (``fixes``, ``equivalences``, ``shim_guard``, ``rank_io``, ``rank_bundle``) and the stub
system (``in_release.shims``) by relative imports, nothing else of the workbench. Usage (through
the launcher's boot):

    main(): the config at sys.argv[1]

The config names the rank, the world, the sources, the server arguments, the fixes and the
requests this rank receives. The rank applies the CPU shims and the requested fixes, builds the
release's own ``ServerArgs``/``PortArgs``, constructs the real ``Scheduler`` (tp rank = dp rank, one
attention-TP rank per DP rank), binds the two sockets the tokenizer manager would own (requests in,
token ids out), sends its requests and runs the scheduler's own event loop. The shim guard holds
the protected modules against the release's source once the scheduler is built (a violation stops
the rank) and again after the run. A collector thread reads the scheduler's ``BatchTokenIDOutput``
messages; when every request of this rank finished it writes ``{"status": "ok", ...}`` to
``result_path``; an idle rank writes it once the busy ranks have (``busy_result_paths``). If the
event loop raises, the rank writes ``{"status": "crashed", ...}`` with the traceback, its frames
and what the crashing frames held (forward mode, batch size, spec-input class), writes its crash
bundle (``rank_bundle.py``) into the config's ``bundle_dir``, then exits 3. The parent ends every
rank either way, and reads each report as a ``rank_result.RankResult``.
"""

import json
import os
import sys
import threading
import time
import traceback

from ..in_release.result_channel import write as _write


def _frames(tb) -> list:
    return [
        {"file": f.filename, "line": f.lineno, "function": f.name, "code": (f.line or "").strip()}
        for f in traceback.extract_tb(tb)
    ]


def _batch_facts(tb) -> dict:
    """Forward mode, batch size and spec-input class as the innermost frame holding a batch saw them."""
    facts: dict = {}
    while tb is not None:
        local = tb.tb_frame.f_locals
        for name in ("forward_batch", "batch", "model_worker_batch"):
            fb = local.get(name)
            if fb is None or not hasattr(fb, "forward_mode"):
                continue
            mode = getattr(fb.forward_mode, "name", str(fb.forward_mode))
            bs = getattr(fb, "batch_size", None)
            try:
                bs = bs() if callable(bs) else bs
                if bs is None and getattr(fb, "seq_lens", None) is not None:
                    bs = int(fb.seq_lens.shape[0])
                bs = int(bs) if bs is not None else None
            except Exception:  # noqa: BLE001 - a fact we could not read stays None
                bs = None
            spec = getattr(fb, "spec_info", None)
            code = tb.tb_frame.f_code
            facts = {
                "forward_mode": mode,
                "batch_size": bs,
                "spec_info": type(spec).__name__ if spec is not None else None,
                "frame": f"{os.path.basename(code.co_filename)}:{tb.tb_lineno} {code.co_name}",
                "variable": name,
            }
        tb = tb.tb_next
    return facts


def _bundle(cfg: dict, exc: BaseException, state: dict, applied: list, fixed: list, equivalent: list) -> dict:
    """``{"bundle": path}`` of this rank's crash bundle (``rank_bundle.py``) for a crash in the event
    loop when the config names a bundle folder; ``{"bundle_error": why}`` when writing it failed."""
    if state["stage"] != "event_loop" or not cfg.get("bundle_dir"):
        return {}
    try:
        from . import rank_bundle  # on use: only a crash in the event loop writes a bundle

        code_state = {
            "shims": [s["name"] for s in applied if s.get("installed")],
            "fixes": fixed,
            "equivalences": [e["name"] for e in equivalent if e.get("installed")],
        }
        return {"bundle": rank_bundle.write(cfg["bundle_dir"], cfg, exc, code_state)}
    except Exception as err:  # noqa: BLE001 - the crash is still reported, with why no bundle
        return {"bundle_error": f"{type(err).__name__}: {err}"}


def _server_args(cfg: dict):
    from sglang.srt.server_args import ServerArgs

    sa = dict(cfg["server_args"])
    args = ServerArgs(**sa)
    return args


def _tree_mask_mode(scheduler) -> str | None:
    """The verify tree-mask mode the release's EAGLE worker chose (FULL_MASK on GPUs)."""
    worker = getattr(scheduler, "draft_worker", None)
    for w in (worker, getattr(worker, "_draft_worker", None)):
        mode = getattr(w, "tree_mask_mode", None)
        if mode is not None:
            return getattr(mode, "name", str(mode))
    return None


def _scheduler(cls, server_args, port_args, rank: int, dp: int):
    """The release's Scheduler for this rank (tp rank = dp rank), built as its run_scheduler_process does.

    Up to 0.5.2x the constructor takes the ranks; later releases publish a runtime context first
    (``runtime_context.publish`` with the rank's WORLD placement) and take only the two arg sets."""
    import inspect

    if "tp_rank" in inspect.signature(cls.__init__).parameters:
        return cls(server_args, port_args, rank, rank, 0, 0, 0, 0, rank if dp > 1 else None)
    from sglang.srt.runtime_context import SpawnRanks, publish, spawn_world_rank

    world = spawn_world_rank(server_args, tp_rank=rank, pp_rank=0)
    publish(server_args, role="scheduler", ranks=SpawnRanks(world_rank=world, dp_rank=None, gpu_id=rank))
    return cls(server_args, port_args)


class Collector(threading.Thread):
    """Reads the scheduler's token-id outputs; sets ``done`` when every request finished."""

    def __init__(self, sock, rids: list, on_done, recv):
        super().__init__(daemon=True)
        self.sock, self.rids, self.on_done, self.recv = sock, set(rids), on_done, recv
        self.outputs: dict = {r: [] for r in rids}
        self.finished: dict = {}
        self.spec: dict = {}
        self.first_token_at: dict = {}

    def run(self) -> None:
        while len(self.finished) < len(self.rids):
            msg = self.recv(self.sock)
            if type(msg).__name__ != "BatchTokenIDOutput":
                continue
            for i, rid in enumerate(msg.rids):
                if rid not in self.rids:
                    continue
                ids = list(msg.output_ids[i]) if msg.output_ids is not None else []
                self.outputs[rid].extend(ids)  # incremental: only the new ids of this message
                self.first_token_at.setdefault(rid, time.time())
                for key in ("spec_verify_ct", "spec_num_correct_drafts", "spec_accepted_tokens"):
                    values = getattr(msg, key, None)
                    if values:
                        self.spec.setdefault(rid, {})[key] = int(values[i])
                reason = msg.finished_reasons[i]
                if reason is not None:
                    self.finished[rid] = reason.to_json() if hasattr(reason, "to_json") else str(reason)
        self.on_done()


def _extra_shims(paths: list) -> list:
    """Load each file and call its ``install()``: a test-only hook for checking the shim guard
    (``--extra-shim``); its changes are held like any other's."""
    import importlib.util

    out = []
    for i, path in enumerate(paths):
        spec = importlib.util.spec_from_file_location(f"wb_extra_shim_{i}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.install()
        out.append({"path": path, "doc": (module.__doc__ or "").strip()[:300]})
    return out


def _after_run(hold) -> dict:
    """The guard again, once the run's passes are over; a guard that fails to run is a violation."""
    try:
        return hold()
    except Exception as exc:  # noqa: BLE001 - fail closed
        return {"violations": [{"module": "", "name": "", "kind": "guard failed", "detail": repr(exc)}]}


def await_requests(scheduler, limit_s: float = 60.0) -> float | None:
    """Wait (at most ``limit_s``) until the scheduler's request socket holds this rank's requests, nothing read.

    Sent before the event loop starts, a request can still be in flight at the loop's first pass; that rank then
    has no batch while its DP peers prefill, and DP attention runs it an IDLE batch: which pass a rank meets idle
    first would depend on timing. With the wait, every rank given requests schedules them at its first pass, and
    a mid-idle rank goes idle when its own requests finish (``MID_IDLE_TOKENS``, counted). The seconds waited;
    None where the scheduler keeps no such socket (``recv_from_tokenizer``, its own on 0.5.12 and 0.5.23, its
    ``ipc_channels``' on 0.5.13 and 0.5.14)."""
    sock = getattr(scheduler, "recv_from_tokenizer", None)
    if sock is None:
        sock = getattr(getattr(scheduler, "ipc_channels", None), "recv_from_tokenizer", None)
    if not callable(getattr(sock, "poll", None)):
        return None
    t = time.time()
    sock.poll(timeout=int(limit_s * 1000))  # zmq: returns once readable (or at the limit); consumes nothing
    return round(time.time() - t, 3)


def _idle_report(cfg: dict, done) -> None:
    """Wait for every busy rank's result, then report this idle rank (``done``: guard after the run)."""
    paths = cfg.get("busy_result_paths", [])
    while True:
        results = []
        for p in paths:
            try:
                with open(p) as f:
                    results.append(json.load(f))
            except (OSError, ValueError):
                results.append(None)
        if results and all(r is not None and r.get("status") == "ok" for r in results):
            done()
            return
        time.sleep(0.2)


def main() -> None:
    cfg = json.loads(open(sys.argv[1]).read())
    rank, result_path = cfg["rank"], cfg["result_path"]
    t0 = time.time()
    timings: dict = {}
    state = {"stage": "import"}
    applied: list = []
    fixed: list = []
    equivalent: list = []
    extra: list = []
    guard: dict = {}
    # The collector's or the idle watcher's report (a thread) and the crash path (this thread) hold the guard
    # after the run in turn: the crash bundle runs the failing method again with its fix applied in place,
    # which a guard running beside it would read as protected code changed.
    report_lock = threading.Lock()
    try:
        from ..in_release import shims  # inside the try: a failed import is this rank's record

        applied = shims.apply(cfg["version"])
        # after the shims, which must be in place before anything imports sglang
        from . import fixes
        from .rank_io import ipc, make_port_args, request

        fixed = fixes.apply(cfg.get("fixes", []))
        from . import equivalences  # applied third, after the shims and the fixes, as every rank does

        equivalent = equivalences.apply(cfg["version"])
        extra = _extra_shims(cfg.get("extra_shims", []))
        state["stage"] = "server_args"
        import zmq
        from sglang.srt.managers.scheduler import Scheduler
        from sglang.srt.server_args import PortArgs

        server_args = _server_args(cfg)
        port_args = make_port_args(PortArgs, cfg)
        ctx = zmq.Context(2)
        send = ctx.socket(zmq.PUSH)
        send.bind(port_args.scheduler_input_ipc_name)
        recv = ctx.socket(zmq.PULL)
        recv.bind(port_args.tokenizer_ipc_name)
        timings["import_s"] = round(time.time() - t0, 2)
        state["stage"] = "scheduler"
        scheduler = _scheduler(Scheduler, server_args, port_args, rank, cfg["dp"])
        timings["scheduler_init_s"] = round(time.time() - t0 - timings["import_s"], 2)
        state["stage"] = "shim-guard"
        from . import shim_guard  # once the scheduler is built: it holds the modules the rank imported

        def hold() -> dict:
            return shim_guard.check(
                fixes.changes(fixed),
                applied,
                cfg.get("traceback_modules", []),
                [cfg["src_root"]],
                equivalences.changes(equivalent),
            )

        guard.update(hold())
        if guard["violations"]:
            names = ", ".join(f"{v['module']}:{v['name']} ({v['kind']})" for v in guard["violations"][:10])
            raise RuntimeError(f"the shim guard found protected code changed: {names}")
        timings["tree_mask_mode"] = _tree_mask_mode(scheduler)
        timings["enable_overlap"] = getattr(scheduler, "enable_overlap", None)  # as the release resolved it
        state["stage"] = "requests"
        reqs = cfg["requests"]
        started = time.time()

        def done() -> None:
            with report_lock:  # never beside the crash path, which may apply a fix in this process
                if state.get("crashed"):
                    return
                guard["after_run"] = _after_run(hold)
                _write(
                    result_path,
                    {
                        "status": "ok",
                        "rank": rank,
                        "outputs": collector.outputs,
                        "finished": collector.finished,
                        "spec": collector.spec,
                        "timings": {**timings, "generate_s": round(time.time() - started, 2)},
                        "time": time.time(),
                        "shims": applied,
                        "fixes": fixed,
                        "equivalences": equivalent,
                        "extra_shims": extra,
                        "shim_guard": guard,
                    },
                )

        sock_send, sock_recv = ipc()
        collector = Collector(recv, [r["rid"] for r in reqs], done, sock_recv)
        if reqs:
            collector.start()
        else:  # an idle rank reports when the busy ranks are done (its guard after the run), or if it fails
            threading.Thread(target=_idle_report, args=(cfg, done), daemon=True).start()
        for r in reqs:
            sock_send(send, request(cfg, r["rid"], r["input_ids"]))
        _write(
            result_path + ".ready",
            {
                "rank": rank,
                "timings": timings,
                "shims": applied,
                "fixes": fixed,
                "equivalences": equivalent,
                "shim_guard": guard,
                "requests": len(reqs),
            },
        )
        if reqs:
            timings["requests_await_s"] = await_requests(scheduler)
        state["stage"] = "event_loop"
        scheduler.run_event_loop()
        raise RuntimeError("the scheduler's event loop returned")
    except BaseException as exc:  # noqa: BLE001 - every failure becomes this rank's record
        report_lock.acquire()  # held until os._exit: no report thread runs the guard after this point
        state["crashed"] = True
        tb = exc.__traceback__
        if guard:
            guard["after_run"] = _after_run(hold)
        bundle = _bundle(cfg, exc, state, applied, fixed, equivalent)
        _write(
            result_path,
            {
                "status": "crashed" if state["stage"] == "event_loop" else "error",
                "rank": rank,
                "stage": state["stage"],
                "exception": type(exc).__name__,
                "message": str(exc),
                "traceback": "".join(traceback.format_exception(exc)),
                "frames": _frames(tb),
                "batch": _batch_facts(tb),
                "shims": applied,
                "fixes": fixed,
                "equivalences": equivalent,
                "extra_shims": extra,
                "shim_guard": guard,
                "timings": {**timings, "crash_after_s": round(time.time() - t0, 2)},
                "time": time.time(),
                **bundle,
            },
        )
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(3)
