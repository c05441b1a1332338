# SPDX-License-Identifier: MIT
"""``phoenix_gds.hf``: transformers' ``from_pretrained`` with Phoenix reading the weights.

    import torch
    from transformers import AutoModelForCausalLM
    from phoenix_gds import hf

    model = hf.from_pretrained(AutoModelForCausalLM, "/models/llama",
                               device_map="cuda:0", dtype=torch.bfloat16)

transformers builds the model on the meta device exactly as its own
``from_pretrained`` does (configuration, dtype, ``keep_in_fp32`` plan, key
renames, device map, tied weights, buffers, generation config); the only
step replaced is reading the checkpoint: :class:`phoenix_gds.Loader` moves
every tensor straight from the files to the device its parameter lives on,
and transformers then places the tensors it is handed instead of reading
them itself.  The result is the model transformers returns, parameter for
parameter.

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
import os
from typing import Any, Dict, List, Mapping, Optional, Union

__all__ = ["from_pretrained", "UnsupportedCheckpoint"]


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


def _transformers():
    try:
        import transformers  # noqa: F401
        from transformers import modeling_utils, monkey_patching
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
    if missing:
        raise ImportError(f"phoenix_gds.hf: transformers {transformers.__version__} lacks "
                          f"{', '.join(missing)} (tested with 5.17)")
    return {
        "version": transformers.__version__,
        "modeling_utils": modeling_utils,
        "patch_output_recorders": monkey_patching.patch_output_recorders,
        "convert_and_load": convert_and_load_state_dict_in_model,
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


def _placements(model: Any, keys: List[str], device_map: Optional[dict], hf: dict,
                weight_mapping: list) -> Dict[str, str]:
    """The device each checkpoint tensor is materialised on: where transformers
    puts the parameter its (renamed) key names, "cpu" without a device map."""
    from transformers.core_model_loading import WeightConverter, WeightRenaming

    meta_state = model.state_dict()
    renamings = [w for w in weight_mapping if isinstance(w, WeightRenaming)]
    converters = [w for w in weight_mapping if isinstance(w, WeightConverter)]
    placements: Dict[str, str] = {}
    for key in keys:
        renamed, _ = hf["rename_source_key"](key, renamings, converters, model.base_model_prefix,
                                             meta_state)
        if renamed not in meta_state and key in meta_state:
            renamed, _ = hf["rename_source_key"](key, [], [], model.base_model_prefix, meta_state)
        if device_map is None:
            placements[key] = "cpu"
        else:
            placements[key] = _loader_device(
                hf["accelerate"].get_device(device_map, renamed, valid_torch_device=True))
    return placements


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


def _read(files: List[str], placements: Dict[str, str], loader_options: Dict[str, Any]) -> dict:
    """Every tensor of @p files, each read straight onto the device @p
    placements names: one Loader for the GPUs (its device map routes each
    tensor), one for the CPU; each reads only its own tensors' bytes.  The
    CPU share of a map that has GPUs too goes to pinned memory, from which
    accelerate's hooks copy it to a GPU at full speed."""
    from . import Loader

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
    hf = _transformers()
    mu = hf["modeling_utils"]
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
    attn_implementation = kwargs.pop("attn_implementation", None)
    experts_implementation = kwargs.pop("experts_implementation", None)

    model_class, config, model_kwargs, from_auto = _model_class(cls, path, subfolder, config,
                                                                kwargs, hf)
    if attn_implementation is not None:
        config._attn_implementation = attn_implementation
    if experts_implementation is not None:
        config._experts_implementation = experts_implementation
    device_map = hf["accelerate"].check_and_set_device_map(device_map)

    download_kwargs = {"cache_dir": None, "force_download": False, "proxies": None,
                       "local_files_only": True, "token": None, "revision": "main",
                       "subfolder": subfolder}
    files, sharded_metadata = mu._get_resolved_checkpoint_files(
        pretrained_model_name_or_path=path, variant=variant, gguf_file=None, use_safetensors=None,
        user_agent={"file_type": "model", "framework": "pytorch", "from_auto_class": from_auto},
        is_remote_code=False,
        transformers_explicit_filename=getattr(config, "transformers_weights", None),
        download_kwargs={**download_kwargs, "commit_hash": None})
    if not files or not all(str(f).endswith(".safetensors") for f in files):
        raise UnsupportedCheckpoint(f"{path}: not a safetensors checkpoint ({files}); "
                                    "phoenix_gds.hf reads safetensors only")
    files = [os.fspath(f) for f in files]

    config, dtype = mu._get_dtype(dtype, files, config, sharded_metadata, None, True, None)
    config.name_or_path = path
    import copy

    config = copy.deepcopy(config)
    with hf["ContextManagers"](model_class.get_init_context(dtype, False, False, None)):
        model = model_class(config, *model_args, **model_kwargs)
        hf["patch_output_recorders"](model)
    dtype_plan = model._get_dtype_plan(dtype)
    if device_map is not None:
        device_map = hf["accelerate"]._get_device_map(
            model, device_map, dict(max_memory) if max_memory else None, None)
        if "disk" in set(device_map.values()):
            raise UnsupportedCheckpoint("device_map: the model does not fit the devices and "
                                        "max_memory given (disk offload is not covered)")

    from ._safetensors import safe_open

    keys: List[str] = []
    for f in files:
        with safe_open(f, framework="numpy") as header:
            keys.extend(header.keys())
    weight_mapping = _weight_mapping(model, keys, mu)
    placements = _placements(model, keys, device_map, hf, weight_mapping)
    state = _read(files, placements, dict(loader_options or {}))

    load_config = mu.LoadStateDictConfig(
        pretrained_model_name_or_path=path, download_kwargs=download_kwargs,
        use_safetensors=True, ignore_mismatched_sizes=ignore_mismatched_sizes,
        sharded_metadata=sharded_metadata,
        device_map=device_map, dtype=dtype, dtype_plan=dtype_plan, hf_quantizer=None,
        device_mesh=None, weights_only=True, weight_mapping=weight_mapping)
    loading_info, _ = hf["convert_and_load"](model, state, load_config)
    del state
    # As transformers: weights the checkpoint lacks (a base model's into a
    # model with a new head) and, with ignore_mismatched_sizes, those it has
    # in another shape are initialised as the model initialises them, and
    # the load report is logged; a size mismatch otherwise raises.
    loading_info = model_class._finalize_model_loading(model, load_config, loading_info)
    model.eval()
    model.set_use_kernels(False, None)
    if model.can_generate() and hasattr(model, "adjust_generation_fn"):
        model.adjust_generation_fn(generation_config, from_auto, None, path, **download_kwargs,
                                   trust_remote_code=None)
    if device_map is not None and len(set(device_map.values())) > 1:
        hf["accelerate"].accelerate_dispatch(model, None, device_map, None, None, False)
    if output_loading_info:
        return model, loading_info.to_dict()
    return model
