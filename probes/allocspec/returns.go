package allocspec

import (
	"errors"
	"fmt"

	"golang.org/x/arch/x86/x86asm"
)

// Code is a function's machine code (x86-64) at its virtual address: the
// function's symbol, or a part the compiler split off (GCC's "name.cold").
type Code struct {
	Addr  uint64
	Bytes []byte
}

// Errors of Returns: the function's return instructions cannot all be
// known, and it must not be probed by them (a return missed is a block
// never seen).
var (
	// ErrTailCall: a jump leaves the function (a tail call, or a part of
	// it the caller did not pass), so it may return from code elsewhere.
	ErrTailCall = errors.New("jumps out of the function")
	// ErrIndirectJump: a jump through a register or memory (a switch
	// table, or a tail call through a pointer): its targets are unknown.
	ErrIndirectJump = errors.New("has an indirect jump")
	// ErrUndecodable: bytes that do not decode as an instruction (data
	// in the code, or a symbol size that is wrong).
	ErrUndecodable = errors.New("does not disassemble")
	// ErrNoReturn: not one return instruction (it only ever throws or
	// exits, or it is not code).
	ErrNoReturn = errors.New("has no return instruction")
)

// Returns lists the addresses of the return instructions of a function
// whose code is parts (the first is the function's own symbol). At a return
// instruction the result is in rax and rsp points at the return address,
// as at a uretprobe, but the probe there is an ordinary uprobe, through
// which a C++ exception unwinds like through any code.
//
// The code is decoded linearly (compilers place no data inside x86-64
// functions). It fails, saying where, when a jump leaves the parts or goes
// through a register or memory: the function may then return from
// somewhere the list would not hold.
func Returns(parts ...Code) ([]uint64, error) {
	rets, tails, err := Exits(parts...)
	if err != nil {
		return nil, err
	}
	if len(tails) > 0 {
		return nil, fmt.Errorf("%w at %#x: to %#x", ErrTailCall, tails[0].At, tails[0].Target)
	}
	return rets, nil
}

// Tail is a direct jump that leaves a function: a tail call (or a jump to
// a part of it the caller did not pass). The code at Target returns in the
// function's stead, with rsp where the function's own return would have it.
type Tail struct {
	At, Target uint64
}

// Exits is Returns for a function that may end in tail calls: it lists the
// return instructions of parts and, apart, the direct jumps that leave
// them, for the caller to follow (the callee's return instructions are the
// function's too). It fails on a jump through a register or memory (its
// targets are unknown), on code that does not decode, and on code with
// neither a return nor a tail call.
func Exits(parts ...Code) (rets []uint64, tails []Tail, err error) {
	inside := func(a uint64) bool {
		for _, p := range parts {
			if a >= p.Addr && a < p.Addr+uint64(len(p.Bytes)) {
				return true
			}
		}
		return false
	}
	for _, p := range parts {
		for off := 0; off < len(p.Bytes); {
			pc := p.Addr + uint64(off)
			if n := endbr(p.Bytes[off:]); n > 0 {
				off += n // the decoder takes its f3 for a lone prefix
				continue
			}
			inst, err := x86asm.Decode(p.Bytes[off:], 64)
			if err != nil {
				return nil, nil, fmt.Errorf("%w at %#x: %w", ErrUndecodable, pc, err)
			}
			next := pc + uint64(inst.Len)
			switch {
			case inst.Op == x86asm.RET:
				rets = append(rets, pc)
			case inst.Op == x86asm.LRET || inst.Op == x86asm.IRET || inst.Op == x86asm.IRETD || inst.Op == x86asm.IRETQ:
				return nil, nil, fmt.Errorf("%w at %#x: %v", ErrUndecodable, pc, inst.Op)
			case inst.Op == x86asm.JMP || isCondJump(inst.Op):
				rel, ok := inst.Args[0].(x86asm.Rel)
				if !ok {
					return nil, nil, fmt.Errorf("%w at %#x: %v", ErrIndirectJump, pc, inst)
				}
				target := uint64(int64(next) + int64(rel))
				if !inside(target) {
					tails = append(tails, Tail{At: pc, Target: target})
				}
			}
			off += inst.Len
		}
	}
	if len(rets) == 0 && len(tails) == 0 {
		return nil, nil, ErrNoReturn
	}
	return rets, tails, nil
}

// endbr returns the length of an endbr64/endbr32 instruction (CET's landing
// pad, first in functions built with -fcf-protection) at the start of b,
// which x86asm does not know, else 0.
func endbr(b []byte) int {
	if len(b) >= 4 && b[0] == 0xf3 && b[1] == 0x0f && b[2] == 0x1e && (b[3] == 0xfa || b[3] == 0xfb) {
		return 4
	}
	return 0
}

func isCondJump(op x86asm.Op) bool {
	switch op {
	case x86asm.JA, x86asm.JAE, x86asm.JB, x86asm.JBE, x86asm.JCXZ, x86asm.JE, x86asm.JECXZ,
		x86asm.JG, x86asm.JGE, x86asm.JL, x86asm.JLE, x86asm.JNE, x86asm.JNO, x86asm.JNP,
		x86asm.JNS, x86asm.JO, x86asm.JP, x86asm.JRCXZ, x86asm.JS,
		x86asm.LOOP, x86asm.LOOPE, x86asm.LOOPNE:
		return true
	}
	return false
}
