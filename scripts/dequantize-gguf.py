#!/usr/bin/env python3
"""Writes a copy of a quantized GGUF model with its quantized tensors dequantized to F16.

The same weights at a higher precision: a target for which the quantized file is a draft
(speculative decoding with a real draft/target pair, docs/speculation.md). Every metadata key
is copied (general.file_type becomes 1, "mostly F16"); F32 tensors (norms) stay F32. Needs the
`gguf` and `numpy` packages (scripts/reference-server's venv has both).

usage: dequantize-gguf.py IN.gguf OUT.gguf
"""

import sys

import gguf
import numpy as np


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, out = sys.argv[1], sys.argv[2]
    reader = gguf.GGUFReader(src)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(out, arch)
    for field in reader.fields.values():
        # Fields the writer adds itself.
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        value = field.contents()
        if field.name == gguf.Keys.General.FILE_TYPE:
            value = int(gguf.LlamaFileType.MOSTLY_F16)
        writer.add_key_value(field.name, value, vtype, sub_type=sub)
    tensors = []
    for t in reader.tensors:
        if t.tensor_type in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            data, qtype = np.asarray(t.data), t.tensor_type
        else:
            # dequantize gives the logical shape, rows last-dimension-first as GGUF stores them.
            data = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float16)
            qtype = gguf.GGMLQuantizationType.F16
        tensors.append((t.name, data, qtype))
        writer.add_tensor_info(t.name, data.shape, data.dtype, data.nbytes, qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for _, data, _ in tensors:
        writer.write_tensor_data(data)
    writer.close()


if __name__ == "__main__":
    main()
