// Which OS helper holds the sleep assertion, per platform. Each helper is a child process that
// lives exactly as long as the assertion and dies with this process, SIGKILL included: it either
// watches our pid (caffeinate -w) or blocks reading its stdin, a pipe that closes when we die.

export type BackendName = 'caffeinate' | 'systemd-inhibit' | 'powershell';

export interface BackendCommand {
  readonly name: BackendName;
  readonly file: string;
  readonly args: readonly string[];
}

const WINDOWS_SCRIPT = [
  '$signature = \'[DllImport("kernel32.dll")] public static extern uint SetThreadExecutionState(uint esFlags);\'',
  '$api = Add-Type -MemberDefinition $signature -Name Power -Namespace Aleph -PassThru',
  // ES_CONTINUOUS | ES_SYSTEM_REQUIRED
  '[void]$api::SetThreadExecutionState([uint32]"0x80000001")',
  '[void][Console]::In.ReadToEnd()',
].join('; ');

export function backendFor(platform: NodeJS.Platform, reason: string, pid: number): BackendCommand | null {
  switch (platform) {
    case 'darwin':
      return { name: 'caffeinate', file: 'caffeinate', args: ['-i', '-w', String(pid)] };
    case 'linux':
      return {
        name: 'systemd-inhibit',
        file: 'systemd-inhibit',
        args: ['--what=idle:sleep', '--who=Aleph', `--why=${reason}`, '--mode=block', 'cat'],
      };
    case 'win32':
      return {
        name: 'powershell',
        file: 'powershell.exe',
        args: ['-NoLogo', '-NoProfile', '-NonInteractive', '-Command', WINDOWS_SCRIPT],
      };
    default:
      return null;
  }
}
