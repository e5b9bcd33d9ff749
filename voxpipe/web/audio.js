// The page's one AudioContext, with the worklet loaded, at a rate the server accepts.

const MIN_RATE = 8000;
const MAX_RATE = 48000; // audio.min_sample_rate..audio.max_sample_rate of the server

/** An AudioContext at the device's rate when the server takes it (no resampling in the
 * browser), else at 48 kHz; call from a click so the browser lets it start. */
export async function openAudio() {
  let context = new AudioContext({ latencyHint: "interactive" });
  if (context.sampleRate < MIN_RATE || context.sampleRate > MAX_RATE) {
    await context.close();
    context = new AudioContext({ latencyHint: "interactive", sampleRate: MAX_RATE });
  }
  await context.audioWorklet.addModule(new URL("./worklet.js", import.meta.url));
  await context.resume();
  return context;
}
