# SPDX-License-Identifier: MIT
"""``phoenix_gds.hf``: transformers' ``from_pretrained`` with Phoenix reading the weights.

    import torch
    from transformers import AutoModelForCausalLM
    from phoenix_gds import hf

    model = hf.from_pretrained(AutoModelForCausalLM, "/models/llama",
                               device_map="cuda:0", dtype=torch.bfloat16)

transformers builds the model on the meta device exactly as its own
``from_pretrained`` does (configuration, dtype, ``keep_in_fp32`` plan, key
renames, device map, tied weights, buffers, generation config); the step
replaced is reading the checkpoint: :class:`phoenix_gds.Loader` moves every
tensor straight from the files to the device its parameter lives on, in a
thread that starts before the model is built wherever the files and the
one device are known without it, and each tensor then becomes its
parameter as transformers places it (by its own helpers), without a copy.
The result is the model transformers returns, parameter for parameter.

Covered: a local folder (or its ``subfolder``) with ``model.safetensors``
or a sharded ``model.safetensors.index.json`` (or their ``variant``);
weights the checkpoint lacks or, with ``ignore_mismatched_sizes``, has in
another shape initialised and reported as transformers does; ``device_map``
of one device ("cpu", "cuda", "cuda:N", N, a ``torch.device``), a dict
{module: device}, or
"auto"/"balanced"/"balanced_low_0"/"sequential" (accelerate's placement,
as transformers computes it).  Refused with an error, not a different
model: quantized checkpoints, remote code, ``.bin``/GGUF checkpoints, hub
names, disk offload, tensor parallelism, adapters.  Tested with
transformers 5.17 (docs/transformers.md).
"""

from __future__ import annotations

import errno
import json
import os
import threading
import time
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

__all__ = ["from_pretrained", "last_phases", "UnsupportedCheckpoint"]


class UnsupportedCheckpoint(NotImplementedError):
    """What ``phoenix_gds.hf.from_pretrained`` does not cover (quantized
    checkpoints, remote code, .bin files, disk offload...): use
    transformers' own ``from_pretrained`` for these."""


# from_pretrained keywords that change what transformers builds in ways this
# function does not reproduce; refused by name rather than ignored.
_REFUSED = {
    "quantization_config": "quantized models",
    "load_in_8bit": "quantized models",
    "load_in_4bit": "quantized models",
    "gguf_file": "GGUF checkpoints",
    "trust_remote_code": "remote code",
    "offload_folder": "disk offload",
    "offload_buffers": "disk offload",
    "tp_plan": "tensor parallelism",
    "tp_size": "tensor parallelism",
    "distributed_config": "tensor parallelism",
    "device_mesh": "tensor parallelism",
    "adapter_name": "adapters",
    "adapter_kwargs": "adapters",
    "state_dict": "a state dict (there is nothing to read)",
    "key_mapping": "custom key mappings",
    "use_kernels": "hub kernels",
    "kernel_config": "hub kernels",
}

# Keywords that only tune what is refused or ignored anyway.
_IGNORED = {"low_cpu_mem_usage", "local_files_only", "_fast_init"}

# Keywords taken at the values that mean what a local safetensors folder
# is; any other value asks for something this function does not read.
_ONLY = {
    "revision": ((None, "main"), "hub revisions (a local folder has one)"),
    "use_safetensors": ((None, True), "the choice of format (safetensors only)"),
}


# transformers' device maps that need the model's sizes to place anything.
_COMPUTED_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")

# What _placing_plan and _assign take from transformers' core_model_loading:
# the steps of convert_and_load_state_dict_in_model that apply when no key
# needs a rename or a conversion.
_PLACING = ("LoadStateDictInfo", "build_glob_alternation", "dot_natural_key", "get_device",
            "rename_source_key", "set_param_for_module", "_add_unmatched_checkpoint_key")

_last_phases: Dict[str, List[float]] = {}


def last_phases() -> Dict[str, List[float]]:
    """Where this process's last ``from_pretrained`` call spent its time:
    {phase: [start, end]} in seconds from the call's start.  "read" (the
    Loader, in a thread) overlaps the phases that build the model; "wait
    for read" is how long the model, built, waited for the weights."""
    return {name: list(span) for name, span in _last_phases.items()}


class _Phases:
    """Records the phases of one call into _last_phases."""

    def __init__(self) -> None:
        self.start = self.mark = time.perf_counter()
        _last_phases.clear()

    def done(self, name: str) -> None:
        """Phase @name ran from the previous one's end until now."""
        now = time.perf_counter()
        self.span(name, self.mark, now)
        self.mark = now

    def span(self, name: str, begin: float, end: float) -> None:
        _last_phases[name] = [begin - self.start, end - self.start]


def _transformers():
    try:
        import transformers  # noqa: F401
        from transformers import core_model_loading, modeling_utils, monkey_patching
        from transformers.core_model_loading import (convert_and_load_state_dict_in_model,
                                                     rename_source_key)
        from transformers.integrations import accelerate as hf_accelerate
        from transformers.models.auto import auto_factory
        from transformers.utils.generic import ContextManagers
    except ImportError as e:
        raise ImportError(
            f"phoenix_gds.hf needs transformers 5 (tested with 5.17) and torch: {e}") from e
    needed = ("LoadStateDictConfig", "_get_resolved_checkpoint_files", "_get_dtype",
              "get_model_conversion_mapping")
    missing = [n for n in needed if not hasattr(modeling_utils, n)]
    missing += [n for n in _PLACING if not hasattr(core_model_loading, n)]
    if missing:
        raise ImportError(f"phoenix_gds.hf: transformers {transformers.__version__} lacks "
                          f"{', '.join(missing)} (tested with 5.17)")
    return {
        "version": transformers.__version__,
        "modeling_utils": modeling_utils,
        "patch_output_recorders": monkey_patching.patch_output_recorders,
        "convert_and_load": convert_and_load_state_dict_in_model,
        "core_model_loading": core_model_loading,
        "rename_source_key": rename_source_key,
        "accelerate": hf_accelerate,
        "auto_factory": auto_factory,
        "ContextManagers": ContextManagers,
    }


def _oserror(code: int, message: str, path: str) -> OSError:
    return OSError(code, f"phoenix_gds.hf.from_pretrained: {message}", path)


def _model_class(cls: Any, path: str, subfolder: str, config: Any, config_kwargs: Dict[str, Any],
                 hf: dict):
    """The concrete model class and its configuration, as transformers resolves them."""
    from transformers import AutoConfig, PreTrainedConfig

    is_auto = hasattr(cls, "_model_mapping")
    if config is None:
        loader = AutoConfig if is_auto else cls.config_class
        if loader is None:
            raise TypeError(f"{cls.__name__} has no config_class; pass config=")
        config, unused = loader.from_pretrained(path, return_unused_kwargs=True,
                                                local_files_only=True, subfolder=subfolder,
                                                **config_kwargs)
    elif isinstance(config, PreTrainedConfig):
        import copy

        config = copy.deepcopy(config)
        unused = dict(config_kwargs)
    else:
        raise TypeError(f"config: expected a transformers PreTrainedConfig, got {type(config)!r}")
    if getattr(config, "quantization_config", None) is not None:
        raise UnsupportedCheckpoint(
            f"{path}: a quantized checkpoint ({type(config.quantization_config).__name__}); "
            "use transformers' from_pretrained")
    if is_auto:
        if type(config) not in cls._model_mapping:
            if getattr(config, "auto_map", None):
                raise UnsupportedCheckpoint(
                    f"{path}: the model's code comes with the checkpoint (remote code, auto_map "
                    f"{sorted(config.auto_map)}); phoenix_gds.hf does not run it")
            raise ValueError(f"{path}: {cls.__name__} has no model for {type(config).__name__}")
        cls = hf["auto_factory"]._get_model_class(config, cls._model_mapping)
    if cls.is_remote_code():
        raise UnsupportedCheckpoint(f"{cls.__name__} is remote code; phoenix_gds.hf does not run it")
    return cls, config, unused, is_auto


def _torch_device(device: Any) -> Any:
    """transformers' device value (int, "cpu", "cuda:N", "disk") as a torch device."""
    import torch

    if isinstance(device, int):
        return torch.device("cuda", device)
    return torch.device(device)


def _loader_device(device: Any) -> str:
    d = _torch_device(device)
    if d.type == "cpu":
        return "cpu"
    if d.type == "cuda":
        return f"cuda:{d.index if d.index is not None else 0}"
    raise UnsupportedCheckpoint(f"device {device!r}: Phoenix loads to the CPU and CUDA GPUs only")


def _one_device(devices: List[Any]) -> Optional[str]:
    """The Loader's name for the one device all of @devices are, else None."""
    names = {_loader_device(d) for d in devices}
    return names.pop() if len(names) == 1 else None


def _placements(model: Any, keys: List[str], device_map: Optional[dict], hf: dict,
                weight_mapping: list) -> Union[str, Dict[str, str]]:
    """The device each checkpoint tensor is materialised on: where transformers
    puts the parameter its (renamed) key names, "cpu" without a device map;
    the device's name alone where the map has one device."""
    from transformers.core_model_loading import WeightConverter, WeightRenaming

    if device_map is None:
        return "cpu"
    one = _one_device(list(device_map.values()))
    if one is not None:
        return one
    meta_state = model.state_dict()
    renamings = [w for w in weight_mapping if isinstance(w, WeightRenaming)]
    converters = [w for w in weight_mapping if isinstance(w, WeightConverter)]
    placements: Dict[str, str] = {}
    for key in keys:
        renamed, _ = hf["rename_source_key"](key, renamings, converters, model.base_model_prefix,
                                             meta_state)
        if renamed not in meta_state and key in meta_state:
            renamed, _ = hf["rename_source_key"](key, [], [], model.base_model_prefix, meta_state)
        placements[key] = _loader_device(
            hf["accelerate"].get_device(device_map, renamed, valid_torch_device=True))
    return placements


def _early_device(device_map: Any) -> Optional[str]:
    """The one device @device_map names when that needs no model, as
    transformers reads it (no map: torch's device context; "cuda": the
    LOCAL_RANK'th GPU); None for a map computed from the model's sizes or
    of several devices.  A guess that lets the read start first:
    from_pretrained checks it against transformers' map."""
    import torch

    if isinstance(device_map, Mapping):
        devices = list(device_map.values())
    elif device_map is None:
        devices = [torch.tensor([]).device]
    elif device_map == "cuda":
        devices = [f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"]
    elif isinstance(device_map, str) and device_map in _COMPUTED_MAPS:
        return None
    else:
        devices = [device_map]
    try:
        return _one_device(devices)
    except (RuntimeError, ValueError, TypeError, UnsupportedCheckpoint):
        return None


def _early_files(folder: str, variant: Optional[str], config: Any) -> Optional[List[str]]:
    """The files transformers resolves for the local @folder (its
    model.safetensors, else its index's shards, of @variant), found without
    transformers so that the read can start first; None where the
    configuration names its own weights file (transformers_weights) or
    neither file is there, and for a configuration that may be refused
    (quantized, remote code), so as not to read what is refused.
    from_pretrained checks the guess against transformers' answer."""
    try:
        if config is None:
            with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
                config = json.load(f)
        fields = config if isinstance(config, dict) else vars(config)
    except (OSError, ValueError, TypeError):
        return None
    if any(fields.get(k) is not None
           for k in ("transformers_weights", "quantization_config", "auto_map")):
        return None

    def named(name: str) -> str:
        if variant is not None:
            stem, ext = name.rsplit(".", 1)
            name = f"{stem}.{variant}.{ext}"
        return os.path.join(folder, name)

    if os.path.isfile(named("model.safetensors")):
        return [named("model.safetensors")]
    try:
        with open(named("model.safetensors.index.json"), encoding="utf-8") as f:
            shards = set(json.load(f)["weight_map"].values())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return [os.path.join(folder, shard) for shard in sorted(shards)]


def _weight_mapping(model: Any, keys: List[str], mu: Any) -> list:
    """transformers' renames and conversions for @model, or none when every
    checkpoint key already names one of its weights (with or without the
    base model's prefix): the usual case, where transformers' mapping would
    leave every key as it is, and building it costs 0.28 s of regular
    expressions in a fresh process."""
    state = model.state_dict()
    prefix = f"{model.base_model_prefix}." if model.base_model_prefix else None

    def direct(key: str) -> bool:
        if key in state:
            return True
        if prefix is None:
            return False
        return prefix + key in state or (key.startswith(prefix) and key[len(prefix):] in state)

    if all(direct(k) for k in keys):
        return []
    return mu.get_model_conversion_mapping(model, None, None)


def _read(files: List[str], placements: Union[str, Dict[str, str]],
          loader_options: Dict[str, Any]) -> dict:
    """Every tensor of @p files, each read straight onto the device @p
    placements names (or all onto the one it is): one Loader for the GPUs
    (its device map routes each tensor), one for the CPU; each reads only
    its own tensors' bytes.  The CPU share of a map that has GPUs too goes
    to pinned memory, from which accelerate's hooks copy it to a GPU at
    full speed."""
    from . import Loader

    if isinstance(placements, str):
        return Loader(placements, **loader_options).load(files, framework="torch")
    cpu_keys = [k for k, d in placements.items() if d == "cpu"]
    gpus = sorted({d for d in placements.values() if d != "cpu"})
    if not gpus:
        return Loader("cpu", **loader_options).load(files, framework="torch")
    default = gpus[0]
    routes = {k: d for k, d in placements.items() if d != default and d != "cpu"}
    gpu_loader = Loader(default, device_map=routes or None, **loader_options)
    if not cpu_keys:
        return gpu_loader.load(files, framework="torch")
    gpu_keys = [k for k, d in placements.items() if d != "cpu"]
    state = gpu_loader.load(files, framework="torch", keys=gpu_keys)
    host_options = {k: v for k, v in loader_options.items() if k not in ("engine", "pinned")}
    state.update(Loader("cpu", pinned=True, **host_options).load(files, framework="torch",
                                                                keys=cpu_keys))
    return state


class _Reading:
    """_read in a thread, while the caller builds the model: the Loader
    releases the GIL for the whole read."""

    def __init__(self, loader_options: Dict[str, Any]) -> None:
        self._options = loader_options
        self._thread: Optional[threading.Thread] = None
        self._what: Tuple[List[str], Union[str, Dict[str, str]]] = ([], {})
        self._state: Optional[dict] = None
        self._error: Optional[BaseException] = None
        self._span = (0.0, 0.0)

    def start(self, files: List[str], placements: Union[str, Dict[str, str]]) -> None:
        self._what = (files, placements)
        self._thread = threading.Thread(target=self._run, name="phoenix_gds.hf read")
        self._thread.start()

    def reads(self, files: List[str], placements: Union[str, Dict[str, str]]) -> bool:
        """Whether the read under way is of these files onto these devices."""
        return self._thread is not None and self._what == (files, placements)

    def _run(self) -> None:
        begin = time.perf_counter()
        try:
            self._state = _read(*self._what, self._options)
        except BaseException as e:  # noqa: BLE001  (raised in the caller by result())
            self._error = e
        self._span = (begin, time.perf_counter())

    def result(self, phases: _Phases) -> dict:
        """What was read, once it is all there; the read's error if it failed."""
        assert self._thread is not None
        self._thread.join()
        phases.span("read", *self._span)
        error, self._error = self._error, None
        if error is not None:
            raise error
        state, self._state = self._state, None
        return state

    def abandon(self) -> None:
        """Waits for the read, if one was started, and drops it: the caller
        failed, or needs other files or devices.  Waiting, not leaving the
        thread behind, frees what it read before the caller goes on."""
        if self._thread is not None:
            self._thread.join()
        self._thread = None
        self._state = self._error = None

    def __enter__(self) -> "_Reading":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.abandon()


def _placing_plan(model: Any, keys: List[str], load_config: Any, meta: dict,
                  hf: dict) -> Tuple[List[Tuple[str, str, Any, Any]], Any]:
    """What transformers' convert_and_load_state_dict_in_model does with the
    checkpoint's @keys when none needs a rename or a conversion (an empty
    weight mapping), decided before the tensors arrive, by its own steps:
    each key's weight name (the base model's prefix added or dropped), dtype
    (the keep_in_fp32 plan, else the meta weight's) and device, as
    (key, name, dtype, device) in its order; and the load report so far.
    Its per-tensor futures and transform objects cost more than placing."""
    cml = hf["core_model_loading"]
    info = cml.LoadStateDictInfo(missing_keys=set(meta), unexpected_keys=set(),
                                 mismatched_keys=set(), conversion_errors={}, error_msgs=[],
                                 skipped_pp_keys=set())
    device_map = load_config.device_map or {"": "cpu"}
    dtype_plan = load_config.dtype_plan or {}
    if dtype_plan:
        kept, glob_of_group, _ = cml.build_glob_alternation(list(dtype_plan))
    plan, named = [], set()
    for key in sorted(keys, key=cml.dot_natural_key):
        name, _ = cml.rename_source_key(key, [], [], model.base_model_prefix, meta)
        if name not in meta:
            cml._add_unmatched_checkpoint_key(name, model, info)
        elif name not in named:  # of two keys naming one weight, transformers keeps the first
            named.add(name)
            match = kept.search(name) if dtype_plan else None
            dtype = dtype_plan[glob_of_group[match.lastgroup]] if match else meta[name].dtype
            plan.append((key, name, dtype,
                         cml.get_device(device_map, name, valid_torch_device=True)))
    return plan, info


def _assign(model: Any, state: dict, plan: List[Tuple[str, str, Any, Any]], info: Any,
            hf: dict) -> None:
    """Each planned tensor becomes its weight: the loaded tensor itself, not
    a copy, where it came on its device in its dtype; cast or moved where
    transformers would."""
    cml = hf["core_model_loading"]
    for key, name, dtype, device in plan:
        cml.set_param_for_module(model, name, state[key].to(device=device, dtype=dtype), info, None)
    model._weight_conversions = []


def from_pretrained(
    cls: Any,
    pretrained_model_name_or_path: Union[str, os.PathLike],
    *model_args: Any,
    config: Any = None,
    device_map: Any = None,
    dtype: Any = None,
    torch_dtype: Any = None,
    max_memory: Optional[Mapping[Any, Any]] = None,
    generation_config: Any = None,
    output_loading_info: bool = False,
    loader_options: Optional[Mapping[str, Any]] = None,
    **kwargs: Any,
) -> Any:
    """``cls.from_pretrained(path, ...)`` with the weights read by Phoenix.

    cls: a transformers model class or auto class (``AutoModelForCausalLM``,
    ``LlamaForCausalLM``...).  path: a local folder.  device_map, dtype
    (``torch_dtype``), max_memory, generation_config, output_loading_info,
    attn_implementation and configuration overrides: as transformers'.
    loader_options: :class:`phoenix_gds.Loader`'s keywords (engine, cache,
    chunk_size, queue_depth, parallel_files, pinned, cold_*).  subfolder,
    variant, ignore_mismatched_sizes, and revision "main" and use_safetensors True
    (what a local safetensors folder is) as transformers'.

    Raises :class:`UnsupportedCheckpoint` (a NotImplementedError) for what it
    does not cover, OSError (errno set) for a missing or unreadable folder.
    """
    phases = _Phases()
    for name in kwargs:
        if name in _REFUSED and kwargs[name] not in (None, False, {}):
            raise UnsupportedCheckpoint(
                f"{name}=: {_REFUSED[name]} are not covered by phoenix_gds.hf; use transformers' "
                "from_pretrained")
        if name in _ONLY and not any(kwargs[name] is v or kwargs[name] == v
                                     for v in _ONLY[name][0]):
            raise UnsupportedCheckpoint(
                f"{name}={kwargs[name]!r}: {_ONLY[name][1]} are not covered by phoenix_gds.hf; "
                "use transformers' from_pretrained")
    subfolder = kwargs.pop("subfolder", None) or ""
    variant = kwargs.pop("variant", None)
    ignore_mismatched_sizes = bool(kwargs.pop("ignore_mismatched_sizes", False))
    kwargs = {k: v for k, v in kwargs.items()
              if k not in _REFUSED and k not in _IGNORED and k not in _ONLY}
    path = os.fspath(pretrained_model_name_or_path)
    if not os.path.isdir(os.path.join(path, subfolder)):
        raise _oserror(errno.ENOENT if not os.path.exists(path) else errno.ENOTDIR,
                       "expected a local checkpoint folder (download it first, e.g. with "
                       "huggingface_hub.snapshot_download)", path)
    if torch_dtype is not None and dtype is None:
        dtype = torch_dtype
    if dtype is None:
        dtype = "auto"
    if isinstance(device_map, Mapping) and "disk" in set(device_map.values()):
        raise UnsupportedCheckpoint("device_map: disk offload is not covered by phoenix_gds.hf")

    with _Reading(dict(loader_options or {})) as reading:
        # Where the files and the device are known without the model (one
        # device), the read starts now and the model is built while the
        # bytes are in flight; the guesses are checked against transformers'
        # own answers below, and a read of other files or devices is dropped.
        early_files = _early_files(os.path.join(path, subfolder), variant, config)
        early_device = _early_device(device_map)
        if early_files is not None and early_device is not None:
            reading.start(early_files, early_device)
        phases.done("arguments")
        hf = _transformers()
        mu = hf["modeling_utils"]
        phases.done("import transformers")
        attn_implementation = kwargs.pop("attn_implementation", None)
        experts_implementation = kwargs.pop("experts_implementation", None)

        model_class, config, model_kwargs, from_auto = _model_class(cls, path, subfolder, config,
                                                                    kwargs, hf)
        if attn_implementation is not None:
            config._attn_implementation = attn_implementation
        if experts_implementation is not None:
            config._experts_implementation = experts_implementation
        device_map = hf["accelerate"].check_and_set_device_map(device_map)
        phases.done("config")

        download_kwargs = {"cache_dir": None, "force_download": False, "proxies": None,
                           "local_files_only": True, "token": None, "revision": "main",
                           "subfolder": subfolder}
        files, sharded_metadata = mu._get_resolved_checkpoint_files(
            pretrained_model_name_or_path=path, variant=variant, gguf_file=None,
            use_safetensors=None,
            user_agent={"file_type": "model", "framework": "pytorch", "from_auto_class": from_auto},
            is_remote_code=False,
            transformers_explicit_filename=getattr(config, "transformers_weights", None),
            download_kwargs={**download_kwargs, "commit_hash": None})
        if not files or not all(str(f).endswith(".safetensors") for f in files):
            raise UnsupportedCheckpoint(f"{path}: not a safetensors checkpoint ({files}); "
                                        "phoenix_gds.hf reads safetensors only")
        files = [os.fspath(f) for f in files]
        phases.done("files")

        config, dtype = mu._get_dtype(dtype, files, config, sharded_metadata, None, True, None)
        config.name_or_path = path
        import copy

        config = copy.deepcopy(config)
        with hf["ContextManagers"](model_class.get_init_context(dtype, False, False, None)):
            model = model_class(config, *model_args, **model_kwargs)
            hf["patch_output_recorders"](model)
        dtype_plan = model._get_dtype_plan(dtype)
        phases.done("model")
        if device_map is not None:
            device_map = hf["accelerate"]._get_device_map(
                model, device_map, dict(max_memory) if max_memory else None, None)
            if "disk" in set(device_map.values()):
                raise UnsupportedCheckpoint("device_map: the model does not fit the devices and "
                                            "max_memory given (disk offload is not covered)")
        phases.done("device map")

        from ._safetensors import safe_open

        keys: List[str] = []
        for f in files:
            with safe_open(f, framework="numpy") as header:
                keys.extend(header.keys())
        weight_mapping = _weight_mapping(model, keys, mu)
        placements = _placements(model, keys, device_map, hf, weight_mapping)
        if not reading.reads(files, placements):
            reading.abandon()
            reading.start(files, placements)
        phases.done("keys")

        load_config = mu.LoadStateDictConfig(
            pretrained_model_name_or_path=path, download_kwargs=download_kwargs,
            use_safetensors=True, ignore_mismatched_sizes=ignore_mismatched_sizes,
            sharded_metadata=sharded_metadata,
            device_map=device_map, dtype=dtype, dtype_plan=dtype_plan, hf_quantizer=None,
            device_mesh=None, weights_only=True, weight_mapping=weight_mapping)
        plan = None
        if not weight_mapping:
            plan, loading_info = _placing_plan(model, keys, load_config, model.state_dict(), hf)
        phases.done("plan")
        # What transformers does after placing the weights and that does not
        # depend on them (the training flag, the generation config) is done
        # while they are read.
        model.eval()
        model.set_use_kernels(False, None)
        if model.can_generate() and hasattr(model, "adjust_generation_fn"):
            model.adjust_generation_fn(generation_config, from_auto, None, path, **download_kwargs,
                                       trust_remote_code=None)
        phases.done("generation config")

        state = reading.result(phases)
        phases.done("wait for read")
    if plan is not None:
        _assign(model, state, plan, loading_info, hf)
    else:
        loading_info, _ = hf["convert_and_load"](model, state, load_config)
    del state
    phases.done("place")
    # As transformers: weights the checkpoint lacks (a base model's into a
    # model with a new head) and, with ignore_mismatched_sizes, those it has
    # in another shape are initialised as the model initialises them, and
    # the load report is logged; a size mismatch otherwise raises.
    loading_info = model_class._finalize_model_loading(model, load_config, loading_info)
    phases.done("finalize")
    if device_map is not None and len(set(device_map.values())) > 1:
        hf["accelerate"].accelerate_dispatch(model, None, device_map, None, None, False)
        phases.done("dispatch")
    if output_loading_info:
        return model, loading_info.to_dict()
    return model
