// Microphone capture: getUserMedia -> the "voxpipe-capture" worklet -> 20 ms PCM16 frames.

export const FRAME_MS = 20;

/**
 * Start capturing; `onFrame(ArrayBuffer)` gets each 20 ms frame of PCM16 mono at
 * `context.sampleRate`. Echo cancellation stays on: the agent's voice from the speakers
 * must not reach the server as the caller barging in.
 */
export async function startMic(context, onFrame) {
  const stream = await navigator.mediaDevices.getUserMedia({
    audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true, autoGainControl: true },
  });
  const source = context.createMediaStreamSource(stream);
  const capture = new AudioWorkletNode(context, "voxpipe-capture", {
    numberOfInputs: 1,
    numberOfOutputs: 1,
    channelCount: 1,
    channelCountMode: "explicit",
    processorOptions: { frameMs: FRAME_MS },
  });
  capture.port.onmessage = (event) => onFrame(event.data);
  // A muted path to the destination keeps the graph pulling the capture node.
  const mute = new GainNode(context, { gain: 0 });
  source.connect(capture).connect(mute).connect(context.destination);
  return {
    stop() {
      capture.port.postMessage("stop");
      source.disconnect();
      capture.disconnect();
      mute.disconnect();
      for (const track of stream.getTracks()) track.stop();
    },
  };
}
