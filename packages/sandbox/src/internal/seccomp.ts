// The seccomp filter bwrap installs when the network is off: socket(AF_UNIX, …) fails with EPERM,
// so a confined command cannot connect to the host's Unix sockets (the Docker daemon, the session
// bus) that the read-only root still shows. socketpair() stays allowed (pipes between a command's
// own processes). Also refused: io_uring_setup (io_uring can open sockets without socket(2)), the
// x32 ABI, and every syscall of a foreign architecture (32-bit binaries), which the filter cannot
// read the same way. A classic BPF program, written once to a file bwrap reads through an fd.
import { lstatSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SandboxError } from '../errors.js';

interface Architecture {
  readonly audit: number;
  readonly socket: number;
  readonly ioUringSetup: number;
  /** x86_64 also accepts x32 syscalls: numbers with this bit set. */
  readonly x32Bit?: number;
}

const ARCHITECTURES: Partial<Record<string, Architecture>> = {
  x64: { audit: 0xc000003e, socket: 41, ioUringSetup: 425, x32Bit: 0x40000000 },
  arm64: { audit: 0xc00000b7, socket: 198, ioUringSetup: 425 },
};

const LOAD_WORD = 0x20; // BPF_LD | BPF_W | BPF_ABS
const JUMP_EQUAL = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const JUMP_GREATER_EQUAL = 0x35; // BPF_JMP | BPF_JGE | BPF_K
const RETURN = 0x06; // BPF_RET | BPF_K
const ALLOW = 0x7fff0000;
const DENY = 0x00050000 | 1; // SECCOMP_RET_ERRNO | EPERM
const AF_UNIX = 1;
// struct seccomp_data: int nr; u32 arch; u64 ip; u64 args[6] (little-endian: args[0]'s low word at 16)
const NR = 0;
const ARCH = 4;
const ARG0 = 16;

type Instruction = readonly [code: number, jumpTrue: number, jumpFalse: number, k: number];
type Step = (index: number, allow: number, deny: number) => Instruction;

/** The program for one architecture: the two returns come last; jumps count from the next instruction. */
export function unixSocketFilter(arch: Architecture): Instruction[] {
  const body: Step[] = [
    () => [LOAD_WORD, 0, 0, ARCH],
    (i, _allow, deny) => [JUMP_EQUAL, 0, deny - i - 1, arch.audit],
    () => [LOAD_WORD, 0, 0, NR],
    ...(arch.x32Bit === undefined
      ? []
      : [
          (i: number, _allow: number, deny: number): Instruction => [
            JUMP_GREATER_EQUAL,
            deny - i - 1,
            0,
            arch.x32Bit ?? 0,
          ],
        ]),
    (i, _allow, deny) => [JUMP_EQUAL, deny - i - 1, 0, arch.ioUringSetup],
    (i, allow) => [JUMP_EQUAL, 0, allow - i - 1, arch.socket],
    () => [LOAD_WORD, 0, 0, ARG0],
    (i, allow, deny) => [JUMP_EQUAL, deny - i - 1, allow - i - 1, AF_UNIX],
  ];
  const allow = body.length;
  const deny = allow + 1;
  return [
    ...body.map((make, index) => make(index, allow, deny)),
    [RETURN, 0, 0, ALLOW],
    [RETURN, 0, 0, DENY],
  ];
}

/** struct sock_filter[], as the kernel reads it (little-endian on both architectures here). */
export function encode(program: readonly Instruction[]): Buffer {
  const bytes = Buffer.alloc(program.length * 8);
  program.forEach(([code, jumpTrue, jumpFalse, k], index) => {
    bytes.writeUInt16LE(code, index * 8);
    bytes.writeUInt8(jumpTrue, index * 8 + 2);
    bytes.writeUInt8(jumpFalse, index * 8 + 3);
    bytes.writeUInt32LE(k >>> 0, index * 8 + 4);
  });
  return bytes;
}

/**
 * The filter's file, in a directory of this user's only (0700, checked), named after its content:
 * shared by every sandbox of this user, rewritten if a tmp cleaner removed it. Undefined on an
 * architecture without a program here (the network namespace alone then, as documented).
 */
export function unixSocketFilterFile(arch: string = process.arch): string | undefined {
  const architecture = ARCHITECTURES[arch];
  if (architecture === undefined) return undefined;
  const bytes = encode(unixSocketFilter(architecture));
  const dir = join(tmpdir(), `aleph-seccomp-${process.getuid?.() ?? 'user'}`);
  const file = join(dir, `unix-${arch}-${bytes.length}.bpf`);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const stat = lstatSync(dir);
  if (!stat.isDirectory() || stat.uid !== process.getuid?.() || (stat.mode & 0o077) !== 0) {
    throw new SandboxError('backend_failed', `${dir} is not a private directory of this user`);
  }
  let current: Buffer | undefined;
  try {
    current = readFileSync(file);
  } catch {
    // absent: written below
  }
  if (current === undefined || !current.equals(bytes)) {
    const temporary = `${file}.${process.pid}`;
    writeFileSync(temporary, bytes, { mode: 0o600 });
    renameSync(temporary, file);
  }
  return file;
}
