"""The tokenizer manager's side of a rank, as the release defines it (runs inside the release environment).

``request``: a ``TokenizedGenerateReqInput`` (a dataclass, or a msgspec Struct from 0.5.2x) built from
its own field list; ``ipc``: the release's socket codec; ``port_args``: the rank's ``PortArgs`` with its
own ipc sockets. Imported by ``release_rank.py`` as a sibling; no workbench import.
"""


def _fields(cls) -> list:
    """(name, required, annotation) of a request class: a dataclass, or a msgspec Struct (0.5.2x)."""
    import dataclasses

    if dataclasses.is_dataclass(cls):
        return [
            (
                f.name,
                f.init and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
                str(f.type),
            )
            for f in dataclasses.fields(cls)
        ]
    import msgspec

    return [(f.name, f.required, str(f.type)) for f in msgspec.structs.fields(cls)]


def request(cfg: dict, rid: str, input_ids: list):
    """A TokenizedGenerateReqInput as the tokenizer manager would send it (greedy, ignore_eos)."""
    from array import array

    from sglang.srt.managers.io_struct import TokenizedGenerateReqInput
    from sglang.srt.sampling.sampling_params import SamplingParams

    sp = SamplingParams(max_new_tokens=cfg["max_new_tokens"], temperature=0.0, ignore_eos=True)
    sp.normalize(None)
    sp.verify(cfg["vocab_size"])
    fields = _fields(TokenizedGenerateReqInput)
    wants_array = any(n == "input_ids" and "array" in t for n, _, t in fields)
    known = {
        "input_text": "",
        "input_ids": array("q", input_ids) if wants_array else list(input_ids),
        "input_embeds": None,
        "mm_inputs": None,
        "token_type_ids": None,
        "sampling_params": sp,
        "return_logprob": False,
        "logprob_start_len": -1,
        "top_logprobs_num": 0,
        "token_ids_logprob": None,
        "stream": False,
        "rid": rid,
    }
    missing = [n for n, required, _ in fields if required and n not in known]
    if missing:
        raise TypeError(f"TokenizedGenerateReqInput needs {missing}, which the lane does not know how to fill")
    return TokenizedGenerateReqInput(**{n: known[n] for n, _, _ in fields if n in known})


def ipc():
    """(send, recv) for the tokenizer-manager side: the release's own codec (sock_send / sock_recv,
    msgpack, from 0.5.2x) or pickled objects (send_pyobj / recv_pyobj) before it."""
    try:
        from sglang.srt.managers.io_struct import sock_recv, sock_send
    except ImportError:
        return (lambda sock, obj: sock.send_pyobj(obj)), (lambda sock: sock.recv_pyobj())
    return sock_send, sock_recv


def make_port_args(cls, cfg: dict):
    """PortArgs with this rank's own ipc sockets in the run folder (the real runtime owns both ends) and
    the run's rendezvous port; built directly, since DP attention's ``init_new`` derives TCP ports
    from the server port and waits for them."""
    import dataclasses

    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name.endswith("_ipc_name"):
            kwargs[f.name] = f"ipc://{cfg['run_dir']}/r{cfg['rank']}-{f.name[:-9]}"
        elif f.name == "nccl_port":
            kwargs[f.name] = cfg["nccl_port"]
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            kwargs[f.name] = None
    return cls(**kwargs)
