/**
 * A bounded in-memory event store for one legacy downstream session, so that a client can resume
 * an SSE stream with `Last-Event-ID` (MCP 2025-11-25 basic/transports §Resumability and
 * Redelivery; SSE polling, SEP-1699). It implements the v1 SDK's `EventStore` interface.
 */
import type { EventStore } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';

interface StoredEvent {
  id: string;
  streamId: string;
  message: JSONRPCMessage;
}

/** Keeps the last `max` events of a session, oldest dropped first. Event ids are `<streamId>~<seq>`. */
export class SessionEventStore implements EventStore {
  private readonly events: StoredEvent[] = [];
  private seq = 0;

  constructor(private readonly max: number) {}

  async storeEvent(streamId: string, message: JSONRPCMessage): Promise<string> {
    const id = `${streamId}~${++this.seq}`;
    this.events.push({ id, streamId, message });
    if (this.events.length > this.max) this.events.shift();
    return id;
  }

  async getStreamIdForEventId(eventId: string): Promise<string | undefined> {
    const i = eventId.lastIndexOf('~');
    return i > 0 ? eventId.slice(0, i) : undefined;
  }

  /** Sends the events of the same stream stored after `lastEventId`, in order; returns the stream id. */
  async replayEventsAfter(
    lastEventId: string,
    { send }: { send: (eventId: string, message: JSONRPCMessage) => Promise<void> },
  ): Promise<string> {
    const streamId = (await this.getStreamIdForEventId(lastEventId)) ?? '';
    const seq = Number(lastEventId.slice(lastEventId.lastIndexOf('~') + 1));
    for (const e of this.events) {
      if (e.streamId !== streamId) continue;
      if (Number(e.id.slice(e.id.lastIndexOf('~') + 1)) <= seq) continue;
      // A priming event carries no message; nothing to replay for it.
      if (Object.keys(e.message as object).length === 0) continue;
      await send(e.id, e.message);
    }
    return streamId;
  }
}
