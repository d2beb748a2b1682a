// The seccomp filter bwrap installs for every command. Setuid and setgid bits are refused with
// EPERM (as systemd's RestrictSUIDSGID): chmod, fchmod, fchmodat and fchmodat2 with S_ISUID or
// S_ISGID in the mode, open, openat and creat that create a file (O_CREAT, O_TMPFILE) with them,
// mknod and mknodat with them; openat2, whose flags the filter cannot read, fails with ENOSYS (libc
// then uses openat). A confined command so cannot leave a setuid binary of the server's user in the
// project. When the network is off, socket() of every family but AF_INET, AF_INET6 and AF_NETLINK
// (which the command's own network namespace confines) and a datagram socketpair() fail with EPERM
// too, so a confined command cannot connect or send to the host's Unix sockets (the Docker daemon,
// the session bus, a datagram socket) that the read-only root still shows, nor to a hypervisor's
// services over AF_VSOCK, which network namespaces do not separate; stream and seqpacket
// socketpair() stay allowed (pipes between a command's own processes). Always refused:
// io_uring_setup (io_uring opens files and sockets without these syscalls), the x32 ABI, and every
// syscall of a foreign architecture (32-bit binaries), which the filter cannot read the same way.
// A classic BPF program, written once to a file bwrap reads through an fd.
import { randomBytes } from 'node:crypto';
import { lstatSync, mkdirSync, readFileSync, renameSync, writeFileSync, type Stats } from 'node:fs';
import { join } from 'node:path';
import { SandboxError } from '../errors.js';
import { tempDir } from './bubblewrap.js';

interface Architecture {
  readonly audit: number;
  readonly socket: number;
  readonly socketpair: number;
  readonly ioUringSetup: number;
  readonly openat2: number;
  /** Syscalls with a mode to check: number → the argument holding the mode. */
  readonly modeAt: readonly (readonly [nr: number, arg: number])[];
  /** Syscalls that may create a file: number → the arguments holding the flags and the mode. */
  readonly openAt: readonly (readonly [nr: number, flags: number, mode: number])[];
  /** x86_64 also accepts x32 syscalls: numbers with this bit set. */
  readonly x32Bit?: number;
}

const ARCHITECTURES: Partial<Record<string, Architecture>> = {
  x64: {
    audit: 0xc000003e,
    socket: 41,
    socketpair: 53,
    ioUringSetup: 425,
    openat2: 437,
    // chmod, fchmod, fchmodat, fchmodat2, creat, mknod, mknodat
    modeAt: [
      [90, 1],
      [91, 1],
      [268, 2],
      [452, 2],
      [85, 1],
      [133, 1],
      [259, 2],
    ],
    openAt: [
      [2, 1, 2],
      [257, 2, 3],
    ], // open, openat
    x32Bit: 0x40000000,
  },
  arm64: {
    audit: 0xc00000b7,
    socket: 198,
    socketpair: 199,
    ioUringSetup: 425,
    openat2: 437,
    modeAt: [
      [52, 1],
      [53, 2],
      [452, 2],
      [33, 2],
    ], // fchmod, fchmodat, fchmodat2, mknodat
    openAt: [[56, 2, 3]], // openat
  },
};

const LOAD_WORD = 0x20; // BPF_LD | BPF_W | BPF_ABS
const AND = 0x54; // BPF_ALU | BPF_AND | BPF_K
const JUMP_EQUAL = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const JUMP_GREATER_EQUAL = 0x35; // BPF_JMP | BPF_JGE | BPF_K
const JUMP_SET = 0x45; // BPF_JMP | BPF_JSET | BPF_K
const RETURN = 0x06; // BPF_RET | BPF_K
const ALLOW = 0x7fff0000;
const DENY = 0x00050000 | 1; // SECCOMP_RET_ERRNO | EPERM
const NO_SYSCALL = 0x00050000 | 38; // SECCOMP_RET_ERRNO | ENOSYS
const SET_ID_BITS = 0o6000; // S_ISUID | S_ISGID
const CREATES = 0o100 | 0o20000000; // O_CREAT | __O_TMPFILE (the same on x86_64 and arm64)
const AF_INET = 2;
const AF_INET6 = 10;
const AF_NETLINK = 16;
const SOCK_STREAM = 1;
const SOCK_SEQPACKET = 5;
const SOCK_TYPE_MASK = 0xf; // the rest are SOCK_CLOEXEC / SOCK_NONBLOCK
// struct seccomp_data: int nr; u32 arch; u64 ip; u64 args[6] (little-endian: args[n]'s low word at 16 + 8n)
const NR = 0;
const ARCH = 4;
const arg = (n: number): number => 16 + 8 * n;
const ARG0 = arg(0);
const ARG1 = arg(1);

type Instruction = readonly [code: number, jumpTrue: number, jumpFalse: number, k: number];
type Label = 'allow' | 'deny' | 'nosys' | 'socket' | 'socketpair' | `mode${number}` | `open${number}`;
/** One instruction with its jump targets as labels (or 0: the next instruction). */
type Step = readonly [code: number, jumpTrue: Label | 0, jumpFalse: Label | 0, k: number];

/**
 * The program for one architecture. Refused: a foreign architecture, x32, io_uring_setup, setuid
 * and setgid mode bits, openat2 (ENOSYS); with the network off also socket() of every family but
 * AF_INET, AF_INET6 and AF_NETLINK (the command's own namespace), AF_UNIX and AF_VSOCK among them, and
 * socketpair() of any type but stream and seqpacket (a datagram socket could be connected, or sent
 * to, at a host socket's path; stream and seqpacket pairs stay connected to each other only).
 */
export function sandboxFilter(arch: Architecture, network: 'on' | 'off'): Instruction[] {
  const modeArgs = [...new Set(arch.modeAt.map(([, at]) => at))];
  const opens = [...new Set(arch.openAt.map(([, flags, mode]) => flags * 8 + mode))];
  const openLabel = (flags: number, mode: number): Label => `open${flags * 8 + mode}`;
  const steps: (Step | Label)[] = [
    [LOAD_WORD, 0, 0, ARCH],
    [JUMP_EQUAL, 0, 'deny', arch.audit],
    [LOAD_WORD, 0, 0, NR],
    ...(arch.x32Bit === undefined ? [] : [[JUMP_GREATER_EQUAL, 'deny', 0, arch.x32Bit] as Step]),
    [JUMP_EQUAL, 'deny', 0, arch.ioUringSetup],
    [JUMP_EQUAL, 'nosys', 0, arch.openat2],
    ...arch.modeAt.map(([nr, at]): Step => [JUMP_EQUAL, `mode${at}`, 0, nr]),
    ...arch.openAt.map(([nr, flags, mode]): Step => [JUMP_EQUAL, openLabel(flags, mode), 0, nr]),
    ...(network === 'off'
      ? ([
          [JUMP_EQUAL, 'socket', 0, arch.socket],
          [JUMP_EQUAL, 'socketpair', 0, arch.socketpair],
        ] as Step[])
      : []),
    [RETURN, 0, 0, ALLOW],
    ...opens.flatMap((key): (Step | Label)[] => [
      openLabel(Math.floor(key / 8), key % 8),
      [LOAD_WORD, 0, 0, arg(Math.floor(key / 8))],
      [JUMP_SET, 0, 'allow', CREATES],
      [LOAD_WORD, 0, 0, arg(key % 8)],
      [JUMP_SET, 'deny', 'allow', SET_ID_BITS],
    ]),
    ...modeArgs.flatMap((at): (Step | Label)[] => [
      `mode${at}`,
      [LOAD_WORD, 0, 0, arg(at)],
      [JUMP_SET, 'deny', 'allow', SET_ID_BITS],
    ]),
    'socket',
    [LOAD_WORD, 0, 0, ARG0],
    [JUMP_EQUAL, 'allow', 0, AF_INET],
    [JUMP_EQUAL, 'allow', 0, AF_INET6],
    [JUMP_EQUAL, 'allow', 'deny', AF_NETLINK],
    'socketpair',
    [LOAD_WORD, 0, 0, ARG1],
    [AND, 0, 0, SOCK_TYPE_MASK],
    [JUMP_EQUAL, 'allow', 0, SOCK_STREAM],
    [JUMP_EQUAL, 'allow', 'deny', SOCK_SEQPACKET],
    'allow',
    [RETURN, 0, 0, ALLOW],
    'deny',
    [RETURN, 0, 0, DENY],
    'nosys',
    [RETURN, 0, 0, NO_SYSCALL],
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
export function sandboxFilterFile(network: 'on' | 'off', arch: string = process.arch): string | undefined {
  const architecture = ARCHITECTURES[arch];
  if (architecture === undefined) return undefined;
  const key = `${network === 'off' ? 'unix-suid' : 'suid'}-${arch}`;
  const bytes = encoded.get(key) ?? encoded.set(key, encode(sandboxFilter(architecture, network))).get(key)!;
  const dir = join(tempDir(), `aleph-seccomp-${process.getuid?.() ?? 'user'}`);
  const file = join(dir, `${key}-${bytes.length}.bpf`);
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
    const temporary = `${file}.${process.pid}.${randomBytes(6).toString('hex')}`; // threads share a pid
    writeFileSync(temporary, bytes, { mode: 0o600 });
    renameSync(temporary, file);
  }
  checked.set(file, lstatSync(file));
  return file;
}

/** Each architecture's program (with the network on or off), encoded once. */
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
