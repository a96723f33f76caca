"""Preparing K/V in the library's quantised storage formats (contract section 6).

    k_fp8, k_global_scale = quantize_fp8(k)            # pass k_global_scale= to the call
    k_packed, k_scale = quantize_nvfp4(k)              # flat (total_k, Hkv, D) -> uint8 + scales
    k_packed, k_scale = quantize_nvfp4(k_pages, paged=True)
    k_packed, k_scales = quantize_nvfp4_blocks(k)      # the scales unswizzled, (..., D // 16)
    k_values = dequantize_kv(k_packed, k_scale)         # back to float32, exactly as stored

NVFP4 stores two E2M1 values per byte (low nibble = even element) and one E4M3 scale per 16
consecutive elements of a row, in the swizzled 128x4 layout whose row is token * Hkv + head
(flat) or (page * Hkv + head) * 128 + token_in_page (paged); paged K/V may instead keep the
scales page-local, in planes the caller lays out from quantize_nvfp4_blocks' scales.
"""
import torch

E2M1_MAX = 6.0
E4M3_MAX = 448.0
NVFP4_GROUP = 16  # elements sharing one scale
BLOCK_SIZE = 128

_E2M1_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
# Midpoints between neighbouring magnitudes: bucketize against them rounds to the nearest.
_E2M1_MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)


def quantize_fp8(x, global_scale=None):
    """x -> (float8_e4m3fn tensor, global scale) with x ~= fp8 * global_scale.

    The default global scale maps x's largest magnitude to E4M3's largest finite value.
    """
    if global_scale is None:
        amax = float(x.abs().max()) if x.numel() else 0.0
        global_scale = amax / E4M3_MAX if amax > 0 else 1.0
    stored = (x.float() / global_scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return stored, float(global_scale)


def swizzled_scale_offsets(rows, cols, cols_per_row):
    """Byte offsets of logical scales (rows, cols) in the swizzled 128x4 layout of a table with
    cols_per_row scales per row (rows and cols: int64 tensors broadcast against each other)."""
    column_groups = (cols_per_row + 3) // 4
    return (((rows // 128) * column_groups + cols // 4) * 512 + (rows % 32) * 16
            + ((rows % 128) // 32) * 4 + cols % 4)


def _scale_offsets(shape, paged, device):
    """Byte offset of the scale of every (token, head, group of 16) of a K/V of `shape`
    (the logical shape, last dim D)."""
    rows = _scale_rows(shape, paged, device)
    cols_per_row = shape[-1] // NVFP4_GROUP
    cols = torch.arange(cols_per_row, device=device)
    return swizzled_scale_offsets(rows.unsqueeze(-1), cols, cols_per_row)


def _scale_rows(shape, paged, device):
    """Row of the scale table for every (token, head) of a flat or paged K/V of `shape`."""
    if paged:
        num_pages, num_heads, page_size = shape[:3]
        page = torch.arange(num_pages, device=device).view(-1, 1, 1)
        head = torch.arange(num_heads, device=device).view(1, -1, 1)
        token = torch.arange(page_size, device=device).view(1, 1, -1)
        return (page * num_heads + head) * BLOCK_SIZE + token
    num_tokens, num_heads = shape[:2]
    return (torch.arange(num_tokens, device=device).view(-1, 1) * num_heads
            + torch.arange(num_heads, device=device).view(1, -1))


def quantize_nvfp4_blocks(x):
    """x (..., D) -> (packed, scales): packed uint8 (..., D // 2), two E2M1 codes a byte (low
    nibble = even element); scales uint8 (..., D // 16), the E4M3 scale bytes in logical order
    (one per 16 consecutive elements), to be laid out swizzled or page-local by the caller.

    Each scale is amax(group) / 6 rounded to E4M3, each value the nearest E2M1 of x / scale.
    """
    head_dim = x.shape[-1]
    groups = x.float().reshape(*x.shape[:-1], head_dim // NVFP4_GROUP, NVFP4_GROUP)
    amax = groups.abs().amax(-1, keepdim=True)
    scale = (amax / E2M1_MAX).clamp(max=E4M3_MAX).to(torch.float8_e4m3fn)
    scale_value = scale.float()
    scaled = torch.where(scale_value > 0, groups / scale_value, torch.zeros_like(groups))
    midpoints = torch.tensor(_E2M1_MIDPOINTS, device=x.device)
    code = torch.bucketize(scaled.abs(), midpoints)
    code = code | ((scaled < 0).long() << 3)
    code = code.reshape(*x.shape).to(torch.uint8)
    packed = code[..., 0::2] | (code[..., 1::2] << 4)
    return packed.contiguous(), scale.view(torch.uint8).squeeze(-1)


def quantize_nvfp4(x, paged=False):
    """x: flat (total_k, Hkv, D) or paged (num_pages, Hkv, 128, D) -> (packed, scale).

    packed: uint8 (..., D // 2). scale: uint8, the swizzled E4M3 block scales, padded to
    ceil(rows / 128) * 128 * (D / 16) bytes (quantize_nvfp4_blocks says how values round).
    """
    head_dim = x.shape[-1]
    packed, scales = quantize_nvfp4_blocks(x)
    num_rows = x[..., 0].numel()
    padded_rows = -(-num_rows // 128) * 128
    table = torch.zeros(padded_rows * (head_dim // NVFP4_GROUP), dtype=torch.uint8,
                        device=x.device)
    table[_scale_offsets(x.shape, paged, x.device).reshape(-1)] = scales.reshape(-1)
    return packed, table


def dequantize_kv(x, scale=None, paged=None):
    """Stored K or V -> float32, exactly: bf16/fp16/fp8 convert; packed NVFP4 (uint8) needs its
    swizzled scale bytes, and whether it is paged (4-D) or flat (3-D, the default by rank)."""
    if x.dtype != torch.uint8:
        return x.float()
    if scale is None:
        raise ValueError("NVFP4 (uint8) K/V needs its block scales")
    paged = x.dim() == 4 if paged is None else paged
    magnitudes = torch.tensor(_E2M1_MAGNITUDES, device=x.device)
    table = torch.cat([magnitudes, -magnitudes])  # code bit 3 is the sign
    # The low nibble is the even element.
    values = torch.stack((table[(x & 0xF).long()], table[(x >> 4).long()]), -1).flatten(-2)
    offsets = _scale_offsets(values.shape, paged, x.device)
    scales = scale.reshape(-1).view(torch.uint8)[offsets].view(torch.float8_e4m3fn).float()
    return values * scales.repeat_interleave(NVFP4_GROUP, dim=-1)
