// The emulator's context switch (emulator.hpp): what swapcontext does, without its
// system call to save the signal mask, which made it 90% of the emulated tests' time.
// System V x86-64: rbx, rbp and r12-r15 are the callee-saved registers; the switch is a
// call, so the caller has saved the rest. The x87 and SSE control words are left alone
// (nothing in a kernel changes them).

#if !defined(__x86_64__)
#error "the CUDA emulator's context switch is written for x86-64"
#endif

// void cascade_rl_emulator_switch(void** save [rdi], void* load [rsi])
// In its own section push, so that the compiler's next output lands where it expects;
// the compiler marks the object's stack non-executable itself.
asm(R"(
  .pushsection .text
  .globl cascade_rl_emulator_switch
  .type cascade_rl_emulator_switch, @function
cascade_rl_emulator_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size cascade_rl_emulator_switch, .-cascade_rl_emulator_switch
  .popsection
)");
