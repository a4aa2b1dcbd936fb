/** Just enough of `oidc-provider` (no types published) for test/helpers/oauth-server.ts. */
declare module 'oidc-provider' {
  export class Provider {
    constructor(issuer: string, configuration: Record<string, unknown>);
    readonly issuer: string;
    proxy: boolean;
    callback(): (req: import('node:http').IncomingMessage, res: import('node:http').ServerResponse) => void;
    use(middleware: (ctx: any, next: () => Promise<void>) => Promise<void>): void;
    on(event: string, listener: (...args: any[]) => void): this;
    registerGrantType(name: string, handler: (ctx: any) => Promise<void>, params?: string[], dupes?: string[]): void;
    AccessToken: new (fields: Record<string, unknown>) => any;
    Client: { find(id: string): Promise<any> };
  }
  export const errors: {
    InvalidGrant: new (detail?: string) => Error;
    InvalidRequest: new (detail?: string) => Error;
    InvalidTarget: new (detail?: string) => Error;
  };
  export default Provider;
}
