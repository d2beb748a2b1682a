// The watchdog of @aleph/pty: ends every terminal's processes when the server goes away by any
// means, SIGKILL included. The server holds the write end of this process's stdin and registers
// each terminal ("+PID\n": the program's pid, which is its session id and its process group) and
// forgets it once its processes have ended ("-PID\n"). End of file on stdin means the server is gone:
// every registered session gets SIGHUP, SIGCONT and SIGTERM, then SIGKILL after GRACE_MS for what
// is left. On Linux that is every process of the session (an interactive shell puts each job in a
// process group of its own); elsewhere, the session's process group. A process that called setsid()
// has left the session and escapes: the stated limit. Built by the package's `build` script.
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
static size_t count, capacity;

static int registered(pid_t pid) {
  for (size_t at = 0; at < count; at++)
    if (sessions[at] == pid) return 1;
  return 0;
}

static void add(pid_t pid) {
  if (pid <= 1 || registered(pid)) return;
  if (count == capacity) {
    size_t grown = capacity ? capacity * 2 : 64;
    pid_t *moved = realloc(sessions, grown * sizeof *sessions);
    if (moved == NULL) return; // out of memory: this one goes unwatched
    sessions = moved;
    capacity = grown;
  }
  sessions[count++] = pid;
}

static void forget(pid_t pid) {
  for (size_t at = 0; at < count; at++)
    if (sessions[at] == pid) {
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
/* Sends `sig` (0: none) to every live process in a registered session; returns how many there are. */
static size_t signal_members(int sig) {
  size_t found = 0;
  DIR *proc = opendir("/proc");
  if (proc == NULL) return 0;
  for (struct dirent *entry; (entry = readdir(proc)) != NULL;) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    char state;
    int ppid, group, session;
    if (!read_proc_stat(entry->d_name, &state, &ppid, &group, &session)) continue;
    if (state == 'Z' || state == 'X' || !registered(session)) continue;
    found++;
    if (sig != 0) kill((pid_t)atoi(entry->d_name), sig);
  }
  closedir(proc);
  return found;
}
#else
static size_t signal_members(int sig) {
  size_t found = 0;
  for (size_t at = 0; at < count; at++)
    if (kill(-sessions[at], sig) == 0 || kill(sessions[at], sig) == 0) found++;
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
      if (line[0] == '+') add((pid_t)atoi(line + 1));
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
