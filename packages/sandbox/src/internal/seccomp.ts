// The seccomp filter bwrap installs when the network is off: socket(AF_UNIX, …) and a datagram
// socketpair() fail with EPERM, so a confined command cannot connect or send to the host's Unix
// sockets (the Docker daemon, the session bus, a datagram socket) that the read-only root still
// shows. Stream and seqpacket socketpair() stay allowed (pipes between a command's own processes).
// Also refused: io_uring_setup (io_uring can open sockets without socket(2)), the x32 ABI, and
// every syscall of a foreign architecture (32-bit binaries), which the filter cannot read the same
// way. A classic BPF program, written once to a file bwrap reads through an fd.
import { lstatSync, mkdirSync, readFileSync, renameSync, writeFileSync, type Stats } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SandboxError } from '../errors.js';

interface Architecture {
  readonly audit: number;
  readonly socket: number;
  readonly socketpair: number;
  readonly ioUringSetup: number;
  /** x86_64 also accepts x32 syscalls: numbers with this bit set. */
  readonly x32Bit?: number;
}

const ARCHITECTURES: Partial<Record<string, Architecture>> = {
  x64: { audit: 0xc000003e, socket: 41, socketpair: 53, ioUringSetup: 425, x32Bit: 0x40000000 },
  arm64: { audit: 0xc00000b7, socket: 198, socketpair: 199, ioUringSetup: 425 },
};

const LOAD_WORD = 0x20; // BPF_LD | BPF_W | BPF_ABS
const AND = 0x54; // BPF_ALU | BPF_AND | BPF_K
const JUMP_EQUAL = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const JUMP_GREATER_EQUAL = 0x35; // BPF_JMP | BPF_JGE | BPF_K
const RETURN = 0x06; // BPF_RET | BPF_K
const ALLOW = 0x7fff0000;
const DENY = 0x00050000 | 1; // SECCOMP_RET_ERRNO | EPERM
const AF_UNIX = 1;
const SOCK_STREAM = 1;
const SOCK_SEQPACKET = 5;
const SOCK_TYPE_MASK = 0xf; // the rest are SOCK_CLOEXEC / SOCK_NONBLOCK
// struct seccomp_data: int nr; u32 arch; u64 ip; u64 args[6] (little-endian: args[n]'s low word at 16 + 8n)
const NR = 0;
const ARCH = 4;
const ARG0 = 16;
const ARG1 = 24;

type Instruction = readonly [code: number, jumpTrue: number, jumpFalse: number, k: number];
type Label = 'allow' | 'deny' | 'socket' | 'socketpair';
/** One instruction with its jump targets as labels (or 0: the next instruction). */
type Step = readonly [code: number, jumpTrue: Label | 0, jumpFalse: Label | 0, k: number];

/**
 * The program for one architecture. Refused: a foreign architecture, x32, io_uring_setup,
 * socket(AF_UNIX, …), and socketpair() of any type but stream and seqpacket (a datagram socket
 * could be connected, or sent to, at a host socket's path; stream and seqpacket pairs stay
 * connected to each other only).
 */
export function unixSocketFilter(arch: Architecture): Instruction[] {
  const steps: (Step | Label)[] = [
    [LOAD_WORD, 0, 0, ARCH],
    [JUMP_EQUAL, 0, 'deny', arch.audit],
    [LOAD_WORD, 0, 0, NR],
    ...(arch.x32Bit === undefined ? [] : [[JUMP_GREATER_EQUAL, 'deny', 0, arch.x32Bit] as Step]),
    [JUMP_EQUAL, 'deny', 0, arch.ioUringSetup],
    [JUMP_EQUAL, 'socket', 0, arch.socket],
    [JUMP_EQUAL, 'socketpair', 0, arch.socketpair],
    [RETURN, 0, 0, ALLOW],
    'socket',
    [LOAD_WORD, 0, 0, ARG0],
    [JUMP_EQUAL, 'deny', 'allow', AF_UNIX],
    'socketpair',
    [LOAD_WORD, 0, 0, ARG1],
    [AND, 0, 0, SOCK_TYPE_MASK],
    [JUMP_EQUAL, 'allow', 0, SOCK_STREAM],
    [JUMP_EQUAL, 'allow', 'deny', SOCK_SEQPACKET],
    'allow',
    [RETURN, 0, 0, ALLOW],
    'deny',
    [RETURN, 0, 0, DENY],
  ];
  const labels = new Map<Label, number>();
  const program: Step[] = [];
  for (const step of steps) {
    if (typeof step === 'string') labels.set(step, program.length);
    else program.push(step);
  }
  // Classic BPF jumps go forward only, counted from the next instruction.
  const offset = (target: Label | 0, index: number): number => {
    if (target === 0) return 0;
    const jump = (labels.get(target) ?? Number.NaN) - index - 1;
    if (!(jump >= 0 && jump < 256)) throw new Error(`seccomp: no forward jump to ${target} from ${index}`);
    return jump;
  };
  return program.map(([code, jumpTrue, jumpFalse, k], index) => [
    code,
    offset(jumpTrue, index),
    offset(jumpFalse, index),
    k,
  ]);
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
  const bytes = encoded.get(arch) ?? encoded.set(arch, encode(unixSocketFilter(architecture))).get(arch)!;
  const dir = join(tmpdir(), `aleph-seccomp-${process.getuid?.() ?? 'user'}`);
  const file = join(dir, `unix-${arch}-${bytes.length}.bpf`);
  // The file as this process last checked or wrote it, unchanged since: one lstat, not a read.
  const known = checked.get(file);
  if (known !== undefined && sameFile(file, known)) return file;
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
  checked.set(file, lstatSync(file));
  return file;
}

/** Each architecture's program, encoded once. */
const encoded = new Map<string, Buffer>();
/** Filter files as checked last: a changed identity, size or time means checking again. */
const checked = new Map<string, Stats>();

function sameFile(file: string, known: Stats): boolean {
  try {
    const now = lstatSync(file);
    return (
      now.isFile() &&
      now.dev === known.dev &&
      now.ino === known.ino &&
      now.size === known.size &&
      now.mtimeMs === known.mtimeMs
    );
  } catch {
    return false; // removed (a tmp cleaner): written again
  }
}
