// The watchdog of @aleph/pty: ends every terminal's processes when the server goes away by any
// means, SIGKILL included. The server holds the write end of this process's stdin and registers
// each terminal ("+PID START\n": the program's pid, which is its session id and its process group,
// and its start time) and forgets it once its processes have ended ("-PID\n"). End of file on stdin means the server is gone:
// every registered session gets SIGHUP, SIGCONT and SIGTERM, then SIGKILL after GRACE_MS for what
// is left. On Linux that is every process of the session (an interactive shell puts each job in a
// process group of its own); elsewhere, the session's process group. A process that called setsid()
// has left the session and escapes: the stated limit. Built by the package's `build` script.
// Never signalled: pid 0 or 1, this process or its group, the server or its group, and (Linux) a
// process started before its session's leader or in a session whose leader's pid now belongs to
// another process (the pid was reused): only what the server started goes.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "proc-stat.h"

enum { GRACE_MS = 500, KILL_ROUNDS = 100, NAP_MS = 10 };

static pid_t *sessions;
static unsigned long long *starts; // each session leader's start time (0: unknown)
static size_t count, capacity;
static pid_t server, server_group, own_group;

/* Never these, whatever was registered. */
static int forbidden(pid_t pid) {
  return pid <= 1 || pid == getpid() || pid == own_group || pid == server || pid == server_group;
}

static int registered(pid_t pid) {
  for (size_t at = 0; at < count; at++)
    if (sessions[at] == pid) return 1;
  return 0;
}

static void add(pid_t pid, unsigned long long start) {
  if (forbidden(pid) || registered(pid)) return;
  if (count == capacity) {
    size_t grown = capacity ? capacity * 2 : 64;
    pid_t *moved = realloc(sessions, grown * sizeof *sessions);
    if (moved != NULL) sessions = moved;
    unsigned long long *moved_starts = realloc(starts, grown * sizeof *starts);
    if (moved_starts != NULL) starts = moved_starts;
    if (moved == NULL || moved_starts == NULL) return; // out of memory: this one goes unwatched
    capacity = grown;
  }
  starts[count] = start;
  sessions[count++] = pid;
}

static void forget(pid_t pid) {
  for (size_t at = 0; at < count; at++)
    if (sessions[at] == pid) {
      starts[at] = starts[count - 1];
      sessions[at] = sessions[--count];
      return;
    }
}

static void nap(long ms) {
  struct timespec time = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&time, &time) == -1 && errno == EINTR) {
  }
}

#ifdef __linux__
/* Whether `session`'s registered leader is still the process it was (or is gone, not reused). */
static int leader_unchanged(size_t at) {
  char pid[24], state;
  int ppid, group, session;
  unsigned long long start;
  snprintf(pid, sizeof pid, "%d", (int)sessions[at]);
  return !read_proc_stat_start(pid, &state, &ppid, &group, &session, &start) || starts[at] == 0 ||
         start == starts[at];
}

/* Sends `sig` (0: none) to every live process in a registered session; returns how many there are. */
static size_t signal_members(int sig) {
  size_t found = 0;
  int *unchanged = calloc(count + 1, sizeof *unchanged);
  if (unchanged == NULL) return 0;
  for (size_t at = 0; at < count; at++) unchanged[at] = leader_unchanged(at);
  DIR *proc = opendir("/proc");
  if (proc == NULL) {
    free(unchanged);
    return 0;
  }
  for (struct dirent *entry; (entry = readdir(proc)) != NULL;) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    char state;
    int ppid, group, session;
    unsigned long long start;
    if (!read_proc_stat_start(entry->d_name, &state, &ppid, &group, &session, &start)) continue;
    if (state == 'Z' || state == 'X') continue;
    pid_t pid = (pid_t)atoi(entry->d_name);
    size_t at = 0;
    while (at < count && sessions[at] != (pid_t)session) at++;
    if (at == count || !unchanged[at] || start < starts[at] || forbidden(pid) || group == own_group ||
        group == server_group)
      continue;
    found++;
    if (sig != 0) kill(pid, sig);
  }
  closedir(proc);
  free(unchanged);
  return found;
}
#else
static size_t signal_members(int sig) {
  size_t found = 0;
  for (size_t at = 0; at < count; at++)
    if (!forbidden(sessions[at]) && (kill(-sessions[at], sig) == 0 || kill(sessions[at], sig) == 0)) found++;
  return found;
}
#endif

static void end_all(void) {
  if (count == 0) return;
  signal_members(SIGHUP);
  signal_members(SIGCONT); // a stopped job would not act on TERM
  signal_members(SIGTERM);
  for (int waited = 0; waited < GRACE_MS; waited += NAP_MS) {
    nap(NAP_MS);
    if (signal_members(0) == 0) return;
  }
  // Again until none is left: a process may fork while we kill.
  for (int round = 0; round < KILL_ROUNDS && signal_members(SIGKILL) > 0; round++) nap(NAP_MS);
}

int main(void) {
  server = getppid();
  server_group = getpgid(server);
  own_group = getpgrp();
  // Only the end of stdin ends us: not Ctrl-C or a hangup meant for the server.
  const int ignored[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGPIPE, SIGTTIN, SIGTTOU};
  for (size_t at = 0; at < sizeof ignored / sizeof ignored[0]; at++) signal(ignored[at], SIG_IGN);
  char buffer[4096];
  size_t used = 0;
  for (;;) {
    ssize_t length = read(STDIN_FILENO, buffer + used, sizeof buffer - used);
    if (length < 0 && errno == EINTR) continue;
    if (length <= 0) break;
    used += (size_t)length;
    char *line = buffer, *end;
    while ((end = memchr(line, '\n', used - (size_t)(line - buffer))) != NULL) {
      *end = '\0';
      if (line[0] == '+') {
        char *after;
        long pid = strtol(line + 1, &after, 10);
        add((pid_t)pid, strtoull(after, NULL, 10));
      }
      if (line[0] == '-') forget((pid_t)atoi(line + 1));
      line = end + 1;
    }
    used -= (size_t)(line - buffer);
    memmove(buffer, line, used);
    if (used == sizeof buffer) used = 0; // no line is this long: drop it
  }
  end_all();
  return 0;
}
