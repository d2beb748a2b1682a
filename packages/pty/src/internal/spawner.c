// The spawn helper of @aleph/pty (Linux): runs each program on a terminal the server opened, so the
// server never forks (see spawner.ts). Started once; goes when its stdin closes (the server is gone).
// It is a child subreaper: a process that leaves its terminal's session (setsid, a daemon's double
// fork) and loses its parent is re-parented to it, not to init, and reaped by it. So when the server
// is gone it ends every process below it (HUP, CONT, TERM, then KILL), these escapees included,
// before it goes; the watchdog ends the terminals' sessions too. Built by the package's `build` script.
//
// Requests come on the request FIFO: "<length>\n", then <length> bytes of NUL-terminated fields:
// id, terminal path, cwd, nice, cgroup, file, argc, argv[argc], envc, env[envc]. Each is answered on
// the reply FIFO, as its program gets there (not in the order asked; a program's answer always comes
// before its exit is reported): "<id> <pid> <start time>\n" once the program runs (it is then a session leader
// with the terminal as its controlling tty, as after forkpty; the start time is 0 if it could not be
// read), or "<id> E <why>\n". Exits are reported on stdout: "<pid> c <code> <left>\n" or
// "<pid> s <signal> <left>\n"; for a program it ran, <left> says whether anything of its session is
// still below this helper when it was reaped: 0 none (so the server need not look), 1 some, ? unknown.
// `nice` (0 to 19) is added to the program's niceness before it runs (as nice(1) -n): a program
// started at a lower CPU priority than the server leaves the server's event loop the CPU it needs.
// `cgroup` (or empty): a cgroup directory the child joins first, before anything else it does (a CPU
// group of lower weight than the server's): with the kernel's autogroups, the session of its own it
// starts would otherwise weigh as much as the server until the program joins such a group itself.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "proc-stat.h"
#include <sys/resource.h>
#ifdef __linux__
#include <sys/prctl.h>
#include <sys/syscall.h>
#endif

#ifndef NSIG
#define NSIG 65 // strict POSIX headers leave it out
#endif

extern char **environ;

enum { GRACE_MS = 500, KILL_ROUNDS = 100, NAP_MS = 10 }; // as the watchdog's

static int child_signal[2] = {-1, -1}; // written by the SIGCHLD handler: some child changed state

static void on_child(int sig) {
  (void)sig;
  int saved = errno;
  if (write(child_signal[1], "", 1) < 0) {
    // full: a wake-up is already pending
  }
  errno = saved;
}

/* pipe2() is not everywhere; this process has one thread, so nothing can fork in between. */
static int flagged_pipe(int fds[2], int flags) {
  if (pipe(fds) < 0) return -1;
  for (int at = 0; at < 2; at++) {
    fcntl(fds[at], F_SETFD, FD_CLOEXEC);
    if (flags & O_NONBLOCK) fcntl(fds[at], F_SETFL, O_NONBLOCK);
  }
  return 0;
}

static void write_all(int fd, const char *text, size_t length) {
  while (length > 0) {
    ssize_t written = write(fd, text, length);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return; // the server is gone: stdin's end will say so
    text += written;
    length -= (size_t)written;
  }
}

/*
 * Every descriptor from 3 up closes on exec: a program starts with its terminal as 0, 1 and 2 and
 * nothing else, whatever the server inherited without FD_CLOEXEC (a launcher's pipe, a file opened
 * for append outside a sandbox: bwrap passes what it is given on). Marked rather than closed, so the
 * child's error pipe still says why an exec failed. close_range (Linux 5.11), else /proc/self/fd,
 * else every number up to the descriptor limit.
 */
static void close_inherited(void) {
#if defined(__linux__) && defined(SYS_close_range)
  if (syscall(SYS_close_range, 3U, ~0U, 1U << 2 /* CLOSE_RANGE_CLOEXEC */) == 0) return;
#endif
  DIR *open_fds = opendir("/proc/self/fd");
  if (open_fds != NULL) {
    for (struct dirent *item; (item = readdir(open_fds)) != NULL;) {
      int fd = atoi(item->d_name);
      if (fd > 2 && fd != dirfd(open_fds)) fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
    closedir(open_fds);
    return;
  }
  struct rlimit limit;
  long last = getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY ? (long)limit.rlim_cur : 65536;
  for (long fd = 3; fd < last; fd++) fcntl((int)fd, F_SETFD, FD_CLOEXEC);
}

/* In the child: tells the helper why it could not run the program, and ends. */
static void fail(int error_pipe, const char *what) {
  char message[512];
  int length = snprintf(message, sizeof message, "%s: %s", what, strerror(errno));
  write_all(error_pipe, message, length < 0 ? 0 : (size_t)length);
  _exit(127);
}

/* Lowers this process's CPU priority by `increment` (nice(1) -n); 0 leaves it. */
static int lower_priority(long increment) {
  if (increment <= 0) return 0;
  errno = 0;
  return nice((int)(increment > 19 ? 19 : increment)) == -1 && errno != 0 ? -1 : 0;
}

/* Joins the cgroup `dir` (writing 0 to its cgroup.procs: this process), if it can; best effort. */
static void join_cgroup(const char *dir) {
  if (dir == NULL || dir[0] == '\0') return;
  char path[PATH_MAX];
  if (snprintf(path, sizeof path, "%s/cgroup.procs", dir) >= (int)sizeof path) return;
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return;
  while (write(fd, "0", 1) < 0 && errno == EINTR) {
  }
  close(fd);
}

static void run(char *tty, char *cwd, long niceness, char *file, char **argv, char **env, int error_pipe) {
  // Undo what the helper set up for itself: ignored signals would be inherited across exec.
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  for (int sig = 1; sig < NSIG; sig++) signal(sig, SIG_DFL);
  if (setsid() < 0) fail(error_pipe, "setsid");
  int terminal = open(tty, O_RDWR); // a session leader's first terminal becomes its controlling tty
  if (terminal < 0) fail(error_pipe, tty);
  if (ioctl(terminal, TIOCSCTTY, 0) < 0) fail(error_pipe, "TIOCSCTTY");
  for (int fd = 0; fd < 3; fd++)
    if (dup2(terminal, fd) < 0) fail(error_pipe, "dup2");
  if (terminal > 2) close(terminal);
  if (chdir(cwd) < 0) fail(error_pipe, cwd);
  close_inherited();
  if (lower_priority(niceness) < 0) fail(error_pipe, "nice");
  environ = env; // so that execvp searches the program's PATH
  execvp(file, argv);
  fail(error_pipe, file);
}

/* The programs this helper ran that it has not reaped yet (each a session leader). */
static pid_t *leaders;
static size_t leader_count, leader_capacity;

static void add_leader(pid_t pid) {
  if (leader_count == leader_capacity) {
    pid_t *grown = realloc(leaders, (leader_capacity = leader_capacity ? 2 * leader_capacity : 64) * sizeof *leaders);
    if (grown == NULL) {
      leader_capacity = leader_count;
      return; // out of memory: its exit says "unknown" (see left_in_session)
    }
    leaders = grown;
  }
  leaders[leader_count++] = pid;
}

/* Forgets `pid` as a leader; whether it was one. */
static int take_leader(pid_t pid) {
  for (size_t at = 0; at < leader_count; at++)
    if (leaders[at] == pid) {
      leaders[at] = leaders[--leader_count];
      return 1;
    }
  return 0;
}

/* Splits `count` NUL-terminated fields off `*cursor` into a NULL-terminated array. */
static char **take(char **cursor, const char *end, long count) {
  if (count < 0 || count > 1 << 20) return NULL;
  char **fields = calloc((size_t)count + 1, sizeof *fields);
  if (fields == NULL) return NULL;
  for (long at = 0; at < count; at++) {
    if (*cursor >= end) {
      free(fields);
      return NULL;
    }
    fields[at] = *cursor;
    *cursor += strlen(*cursor) + 1;
  }
  return fields;
}

/*
 * Spawns whose program has neither exec'd nor failed yet: each is answered once its error pipe says
 * which (closed by the exec, or carrying the reason), not waited for in turn, so that a program
 * slow to reach its exec (a low CPU weight on a busy machine: see `cgroup`) holds up no other spawn.
 */
struct pending {
  char id[24];
  pid_t pid;
  int pipe;
};
static struct pending *pendings;
static size_t pending_count, pending_capacity;
static int reply = -1;

static void send_answer(char *answer, int length) {
  for (char *at = answer; at < answer + length - 1; at++)
    if (*at == '\n') *at = ' ';
  write_all(reply, answer, length < 0 ? 0 : (size_t)length);
}

/*
 * Answers the pending spawn `at` (its pipe is readable, or its program was reaped: `reaped`) and
 * forgets it; whether its program ran. One that failed is reaped here, so no exit is reported for it.
 */
static int settle_pending(size_t at, int reaped) {
  struct pending spawn = pendings[at];
  pendings[at] = pendings[--pending_count];
  char why[512] = "";
  ssize_t read_length;
  while ((read_length = read(spawn.pipe, why, sizeof why - 1)) < 0 && errno == EINTR) {
  }
  close(spawn.pipe);
  char answer[600];
  int answer_length;
  if (read_length > 0) {
    why[read_length] = '\0';
    if (!reaped)
      while (waitpid(spawn.pid, NULL, 0) < 0 && errno == EINTR) {
      }
    answer_length = snprintf(answer, sizeof answer, "%s E %s\n", spawn.id, why);
  } else {
    // With its start time (its pid's identity: not reaped yet, it cannot be reused), so that the
    // server need not read /proc for it; 0 when already reaped.
    char pid_text[24], state;
    int parent, group, session;
    unsigned long long started = 0;
    snprintf(pid_text, sizeof pid_text, "%d", (int)spawn.pid);
    if (reaped || !read_proc_stat_start(pid_text, &state, &parent, &group, &session, &started)) started = 0;
    answer_length = snprintf(answer, sizeof answer, "%s %d %llu\n", spawn.id, (int)spawn.pid, started);
    add_leader(spawn.pid);
  }
  send_answer(answer, answer_length);
  return read_length <= 0;
}

static int add_pending(const char *id, pid_t pid, int pipe) {
  if (pending_count == pending_capacity) {
    size_t capacity = pending_capacity ? 2 * pending_capacity : 64;
    struct pending *grown = realloc(pendings, capacity * sizeof *pendings);
    if (grown == NULL) return -1;
    pendings = grown;
    pending_capacity = capacity;
  }
  struct pending *spawn = &pendings[pending_count++];
  snprintf(spawn->id, sizeof spawn->id, "%s", id);
  spawn->pid = pid;
  spawn->pipe = pipe;
  return 0;
}

static void spawn_program(char *request, size_t length) {
  char *cursor = request, *end = request + length;
  // id tty cwd nice cgroup file argc
  char **head = length > 0 && end[-1] == '\0' ? take(&cursor, end, 7) : NULL;
  char **argv = head ? take(&cursor, end, strtol(head[6], NULL, 10)) : NULL;
  char **count = argv ? take(&cursor, end, 1) : NULL;
  char **env = count ? take(&cursor, end, strtol(count[0], NULL, 10)) : NULL;
  char answer[600];
  int answer_length = 0;
  int error_pipe[2];
  if (env == NULL || argv[0] == NULL) {
    answer_length = snprintf(answer, sizeof answer, "%s E malformed request\n", head ? head[0] : "0");
  } else if (flagged_pipe(error_pipe, 0) < 0) {
    answer_length = snprintf(answer, sizeof answer, "%s E pipe: %s\n", head[0], strerror(errno));
  } else {
    pid_t pid = fork();
    if (pid == 0) {
      close(error_pipe[0]);
      join_cgroup(head[4]);
      run(head[1], head[2], strtol(head[3], NULL, 10), head[5], argv, env, error_pipe[1]);
    }
    int fork_error = errno;
    close(error_pipe[1]);
    // The pipe closes on exec (success) or carries the reason (failure): answered then.
    if (pid < 0) {
      close(error_pipe[0]);
      answer_length = snprintf(answer, sizeof answer, "%s E fork: %s\n", head[0], strerror(fork_error));
    } else if (add_pending(head[0], pid, error_pipe[0]) < 0) {
      // Out of memory for the list: waited for here, as one.
      answer_length = 0;
      char why[512] = "";
      ssize_t read_length;
      while ((read_length = read(error_pipe[0], why, sizeof why - 1)) < 0 && errno == EINTR) {
      }
      close(error_pipe[0]);
      if (read_length > 0) {
        why[read_length] = '\0';
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
        }
        answer_length = snprintf(answer, sizeof answer, "%s E %s\n", head[0], why);
      } else {
        answer_length = snprintf(answer, sizeof answer, "%s %d 0\n", head[0], (int)pid);
        add_leader(pid);
      }
    }
  }
  if (answer_length != 0) send_answer(answer, answer_length);
  free(head);
  free(argv);
  free(count);
  free(env);
}

/*
 * Whether a process of the session `leader` led (reaped just now) is still below us: '0' none, '1'
 * some, '?' unknown. What is left of a session below us is, or is below, a child of ours in that
 * session (an orphan we adopted as subreaper), so our children's sessions (getsid: no /proc read
 * each) say it. Nothing can join a session none of whose processes is left.
 */
static char left_in_session(pid_t leader) {
  char path[64], text[4096];
  snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)getpid(), (int)getpid());
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return '?'; // a kernel without children lists
  ssize_t length = read(fd, text, sizeof text - 1);
  close(fd);
  if (length < 0 || length == (ssize_t)sizeof text - 1) return '?'; // unreadable, or too many to read whole
  text[length] = '\0';
  for (char *at = text, *end; *at != '\0'; at = end) {
    long child = strtol(at, &end, 10);
    if (end == at) break;
    if (getsid((pid_t)child) == leader) return '1';
  }
  return '0';
}

static void report_exits(void) {
  char drain[64];
  while (read(child_signal[0], drain, sizeof drain) > 0) {
  }
  int status;
  for (pid_t pid; (pid = waitpid(-1, &status, WNOHANG)) > 0;) {
    // Not answered yet: answered first (its exit is reported after its answer), unless it never ran.
    size_t at = 0;
    while (at < pending_count && pendings[at].pid != pid) at++;
    if (at < pending_count && !settle_pending(at, 1)) continue;
    char line[64];
    char left = take_leader(pid) ? left_in_session(pid) : '?';
    int length = WIFSIGNALED(status)
                     ? snprintf(line, sizeof line, "%d s %d %c\n", (int)pid, WTERMSIG(status), left)
                     : snprintf(line, sizeof line, "%d c %d %c\n", (int)pid, WEXITSTATUS(status), left);
    write_all(STDOUT_FILENO, line, (size_t)length);
  }
}

/* The server, which started us, and its group: read at start (after its death our parent changes). */
static pid_t server, server_group;

struct entry {
  pid_t pid, parent, group;
  char state;
  char below;
};

static int by_pid(const void *left, const void *right) {
  pid_t a = ((const struct entry *)left)->pid, b = ((const struct entry *)right)->pid;
  return (a > b) - (a < b);
}

static void nap(long ms) {
  struct timespec time = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&time, &time) == -1 && errno == EINTR) {
  }
}

/*
 * Reaps what has ended, then sends `sig` (0: none) to every live process below this one, and to its
 * process group (a child it forked since the scan is in it); returns how many there are. Found by
 * their parent in /proc/PID/stat, level by level (no /proc/PID/task/TID/children on every kernel).
 */
static size_t signal_descendants(int sig) {
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
  size_t count = 0, capacity = 0, found = 0;
  struct entry *entries = NULL;
  DIR *proc = opendir("/proc");
  if (proc == NULL) return 0;
  for (struct dirent *item; (item = readdir(proc)) != NULL;) {
    if (item->d_name[0] < '0' || item->d_name[0] > '9') continue;
    struct entry read_entry = {(pid_t)atoi(item->d_name), 0, 0, 0, 0};
    int parent, group, session;
    if (!read_proc_stat(item->d_name, &read_entry.state, &parent, &group, &session)) continue;
    read_entry.parent = (pid_t)parent;
    read_entry.group = (pid_t)group;
    if (count == capacity) {
      struct entry *grown = realloc(entries, (capacity = capacity ? capacity * 2 : 256) * sizeof *entries);
      if (grown == NULL) break; // out of memory: the next round sees the rest
      entries = grown;
    }
    entries[count++] = read_entry;
  }
  closedir(proc);
  pid_t self = getpid(), own_group = getpgrp();

  if (count > 0) qsort(entries, count, sizeof *entries, by_pid);
  for (int changed = 1; changed;) { // a process is below us if its parent is us or below us
    changed = 0;
    for (size_t at = 0; at < count; at++) {
      struct entry key = {entries[at].parent, 0, 0, 0, 0}, *parent;
      if (entries[at].below) continue;
      if (entries[at].parent == self ||
          ((parent = bsearch(&key, entries, count, sizeof *entries, by_pid)) != NULL && parent->below))
        entries[at].below = changed = 1;
    }
  }
  for (size_t at = 0; at < count; at++) {
    if (!entries[at].below || entries[at].state == 'Z' || entries[at].state == 'X') continue;
    // Never pid 0 or 1, this process, the server or their groups: only what is below us.
    pid_t pid = entries[at].pid, group = entries[at].group;
    if (pid <= 1 || pid == self || pid == server) continue;
    found++;
    if (sig == 0) continue;
    kill(pid, sig);
    if (group > 1 && group != own_group && group != server && group != server_group) kill(-group, sig);
  }
  free(entries);
  return found;
}

/* The server is gone: everything below us goes too, as the watchdog ends the terminals' sessions. */
static void end_descendants(void) {
  if (signal_descendants(SIGHUP) == 0) return;
  signal_descendants(SIGCONT); // a stopped job would not act on TERM
  signal_descendants(SIGTERM);
  for (int waited = 0; waited < GRACE_MS; waited += NAP_MS) {
    nap(NAP_MS);
    if (signal_descendants(0) == 0) return;
  }
  // Again until none is left: a process may fork while we kill, and its children come to us.
  for (int round = 0; round < KILL_ROUNDS && signal_descendants(SIGKILL) > 0; round++) nap(NAP_MS);
  signal_descendants(0); // reaps the last ones
}

int main(int argc, char **argv) {
  // node-pty's path (see spawner.ts nodePtyWrapper): `[--cgroup DIR] [--nice N] --exec FILE ARG…`
  // runs FILE, in place, with nothing inherited past descriptor 2 (in DIR, N added to its niceness).
  if (argc >= 5 && strcmp(argv[1], "--cgroup") == 0) {
    join_cgroup(argv[2]);
    argv += 2;
    argc -= 2;
  }
  if (argc >= 5 && strcmp(argv[1], "--nice") == 0) {
    if (lower_priority(strtol(argv[2], NULL, 10)) < 0) {
      fprintf(stderr, "nice: %s\r\n", strerror(errno));
      return 127;
    }
    argv += 2;
    argc -= 2;
  }
  if (argc >= 3 && strcmp(argv[1], "--exec") == 0) {
    close_inherited();
    execvp(argv[2], argv + 2);
    fprintf(stderr, "%s: %s\r\n", argv[2], strerror(errno));
    return 127;
  }
  server = getppid();
  server_group = getpgid(server);
  if (argc != 3) {
    fprintf(stderr, "usage: %s REQUEST_FIFO REPLY_FIFO\n", argv[0]);
    return 2;
  }
  // We stay until the server is gone (stdin closes): not for a Ctrl-C or a hangup (spawner.ts starts
  // us in a session of our own, but a signal may still be sent to us).
  const int ignored[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGPIPE, SIGTTIN, SIGTTOU};
  for (size_t at = 0; at < sizeof ignored / sizeof ignored[0]; at++) signal(ignored[at], SIG_IGN);
  // Read-write, so that no open waits for the server's end.
  int request = open(argv[1], O_RDWR | O_CLOEXEC | O_NONBLOCK);
  reply = open(argv[2], O_RDWR | O_CLOEXEC);
  if (request < 0 || reply < 0 || flagged_pipe(child_signal, O_NONBLOCK) < 0) {
    perror("aleph-pty-spawner");
    return 1;
  }
#ifdef __linux__
  // Orphans below us come to us, not to init: see the top of this file.
  prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
#endif
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_handler = on_child;
  action.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigaction(SIGCHLD, &action, NULL);

  size_t capacity = 1 << 16, used = 0;
  char *buffer = malloc(capacity);
  struct pollfd *watched = NULL;
  size_t watched_capacity = 0;
  for (;;) {
    if (watched_capacity < 3 + pending_count) {
      struct pollfd *grown = realloc(watched, (3 + pending_capacity) * sizeof *watched);
      if (grown == NULL) return 1;
      watched = grown;
      watched_capacity = 3 + pending_capacity;
    }
    watched[0] = (struct pollfd){STDIN_FILENO, POLLIN, 0};
    watched[1] = (struct pollfd){request, POLLIN, 0};
    watched[2] = (struct pollfd){child_signal[0], POLLIN, 0};
    size_t polled = pending_count;
    for (size_t at = 0; at < polled; at++) watched[3 + at] = (struct pollfd){pendings[at].pipe, POLLIN, 0};
    if (poll(watched, (nfds_t)(3 + polled), -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    // Answers first (a program's exit is reported after its answer), by pipe: the list may move.
    for (size_t at = 0; at < polled; at++) {
      if (!watched[3 + at].revents) continue;
      for (size_t found = 0; found < pending_count; found++)
        if (pendings[found].pipe == watched[3 + at].fd) {
          settle_pending(found, 0);
          break;
        }
    }
    if (watched[2].revents) report_exits();
    if (watched[0].revents) {
      char ignored_input[256];
      ssize_t length = read(STDIN_FILENO, ignored_input, sizeof ignored_input);
      if (length == 0 || (length < 0 && errno != EINTR && errno != EAGAIN)) break; // the server is gone
    }
    if (!watched[1].revents) continue;
    ssize_t length = read(request, buffer + used, capacity - used);
    if (length <= 0) continue;
    used += (size_t)length;
    for (;;) {
      char *newline = memchr(buffer, '\n', used < 24 ? used : 24);
      if (newline == NULL) break;
      size_t body = strtoul(buffer, NULL, 10), header = (size_t)(newline - buffer) + 1;
      if (header + body > capacity) {
        char *grown = buffer == NULL ? NULL : realloc(buffer, header + body);
        if (grown == NULL) return 1;
        buffer = grown;
        capacity = header + body;
      }
      if (used < header + body) break;
      spawn_program(buffer + header, body);
      used -= header + body;
      memmove(buffer, buffer + header + body, used);
    }
  }
  // The server is gone: its FIFOs' folder goes with us, and every process below us.
  unlink(argv[1]);
  unlink(argv[2]);
  char *slash = strrchr(argv[1], '/');
  if (slash != NULL) {
    *slash = '\0';
    rmdir(argv[1]);
  }
  end_descendants();
  return 0;
}
