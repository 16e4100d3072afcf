// Package usdt reads the USDT (SystemTap SDT) probes of ELF files and the
// argument specs that say where each argument is at the probe, so that a
// BPF program can attach to them and read their arguments generically.
//
// <sys/sdt.h> compiles a probe to a nop and a .note.stapsdt note (SDT v3:
// note type 3, owner "stapsdt") holding the nop's address, the link-time
// address of the .stapsdt.base section, the address of an optional
// semaphore, and the strings provider, name and arguments. PyTorch's CUDA
// caching allocator carries such probes in libc10_cuda.so,
// pytorch:malloc(ptr, device, size, stream) and pytorch:free(ptr), guarded
// by semaphores: the block layer of vramprof's memory model.
//
// Two layers, each usable on its own:
//
//   - Probes and Open read the notes and compute what an attacher needs:
//     the probe's file offset (the uprobe address, adjusted for prelink
//     through .stapsdt.base) and the semaphore's file offset (the
//     reference counter the kernel raises while the uprobe is attached,
//     cilium/ebpf's UprobeOptions.RefCtrOffset). Attaching without it leaves
//     the semaphore at 0 and guarded probes never fire.
//   - ParseArgs and ParseArg turn x86-64 argument specs in GNU as syntax
//     ("8@%rax -4@$-5 8@8(%r12)") into Args: a register of the kernel's
//     struct pt_regs, a constant, or memory at a register plus an offset,
//     with a size and signedness. Arg.Encode packs one into a u64 for a BPF
//     map; operands the BPF side cannot evaluate (%rip-relative, segment,
//     indexed) are KindUnsupported, never guessed.
//
// Only x86-64 argument syntax is understood; note parsing is
// architecture-neutral (32- and 64-bit, either byte order). Functions are
// safe for concurrent use; the values they return are not shared.
//
// Imports, besides the standard library: nothing.
package usdt
